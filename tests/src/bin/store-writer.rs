//! A test helper: writes keys `k0`, `k1`, … to an embedded store whose
//! flush interval is an hour (so nothing reaches the database file by a
//! durable commit; with a second argument `each`, the log synced before
//! each write returns; with `flushing`, the log synced and a batch
//! committed to the database every 2 ms, so a kill often lands mid-commit),
//! printing `acked N` once write N has returned (every sixteenth value is
//! some 1.1 MB, kept in a file of its own beside the database), until it
//! is killed. The store suite kills it with SIGKILL and checks that every
//! acknowledged write is there when the store is opened again.

use std::io::Write;
use std::time::Duration;

use weft_store::{CommitPolicy, EmbeddedStore, Flush, Store};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: store-writer STORE_FILE"))?;
    let flush = match std::env::args().nth(2).as_deref() {
        Some("each") => Flush::EachWrite,
        Some("flushing") => Flush::Every(Duration::from_millis(2)),
        _ => Flush::Every(Duration::from_secs(3600)),
    };
    let policy = CommitPolicy {
        after: Duration::ZERO,
        ..CommitPolicy::default()
    };
    let store = EmbeddedStore::open_configured(path.as_ref(), flush, policy)?;
    let mut out = std::io::stdout().lock();
    for n in 0u64.. {
        // Every sixteenth value is big enough to be kept in a file of its own
        // (the store suite checks the same rule).
        let value = format!("value {n}");
        let value = if n % 16 == 0 {
            value.repeat(160_000)
        } else {
            value
        }
        .into_bytes();
        store.put(&format!("k{n:06}"), value, None).await?;
        writeln!(out, "acked {n}")?;
        out.flush()?;
    }
    Ok(())
}
