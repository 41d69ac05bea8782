//! A real PostgreSQL with the pgvector extension, for the tests of
//! knowledge bases kept in a table (`store: {kind: pgvector}`).
//!
//! Debian's PostgreSQL comes without pgvector; PyPI's `pgserver` ships a
//! PostgreSQL build with pgvector in it. `.ci/run` installs it into
//! `target/python-venv` (or set `WEFT_SDK_PYTHON` to an interpreter that
//! has it). Each [`TestPostgres`] is a server of its own in a temporary
//! directory, on a Unix socket, stopped and removed when it is dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

use anyhow::{Context, Result, bail};

/// Starts the server in the directory given, prints its URL, and stops it
/// (removing the directory) when its standard input closes.
const SERVE: &str = r#"
import sys, pgserver
server = pgserver.get_server(sys.argv[1], cleanup_mode="delete")
server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
print(server.get_uri(), flush=True)
sys.stdin.read()
"#;

/// A running PostgreSQL with pgvector.
pub struct TestPostgres {
    /// Its connection URL (`postgresql://postgres:@/postgres?host=DIR`).
    pub url: String,
    child: Child,
    stdin: Option<ChildStdin>,
}

fn python() -> PathBuf {
    std::env::var_os("WEFT_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo().join("target/python-venv/bin/python"))
}

impl TestPostgres {
    /// Starts a server in a fresh directory named after `name`.
    pub fn start(name: &str) -> Result<Self> {
        let python = python();
        let dir = std::env::temp_dir().join(format!("weft-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut child = Command::new(&python)
            .args(["-c", SERVE])
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| {
                format!(
                    "starting PostgreSQL through {} (install it: target/python-venv/bin/pip install pgserver, as .ci/run does)",
                    python.display()
                )
            })?;
        let stdout = child.stdout.take().context("the server's stdout")?;
        let mut url = String::new();
        BufReader::new(stdout).read_line(&mut url)?;
        let url = url.trim().to_owned();
        if !url.starts_with("postgresql://") {
            let _ = child.kill();
            bail!(
                "pgserver did not start PostgreSQL (is it installed? target/python-venv/bin/pip install pgserver, as .ci/run does)"
            );
        }
        let stdin = child.stdin.take();
        Ok(Self { url, child, stdin })
    }

    /// A connection, for a test to set its tables up.
    pub async fn connect(&self) -> Result<tokio_postgres::Client> {
        let (client, connection) =
            tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        // Closing its input lets the helper stop the server and clean up.
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
    }
}
