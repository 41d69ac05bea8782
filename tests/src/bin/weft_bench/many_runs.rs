//! W6: many runs at once, batch after batch on one coordinator, so a rate
//! or a memory figure that drifts with the runs kept shows.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde_json::json;
use weft_client::Client;

use super::{Args, Figure, chain, median};

/// W6: `--runs` runs of a 10-node chain submitted at once, `--batches`
/// times on one coordinator: each batch's time from its first submission
/// to its last run's end; the figure is the median batch's rate. Every run
/// must complete with its ten increments: nothing lost. Each batch's rate
/// and the process's resident memory after it go to stderr, so a long soak
/// shows whether either drifts. With ten batches or more, a second figure,
/// `w6_soak`: the resident memory each finished run adds, from the end of
/// the first quarter of the batches (the caches and pools warm) to the
/// end, with the rates of the first and last quarters in its label.
/// Resident memory here is what the process holds: its resident set less
/// the pages it freed lazily (`LazyFree` in `/proc/self/smaps_rollup`:
/// jemalloc gives freed pages back with `MADV_FREE`, and the kernel takes
/// them whenever it needs memory, before it would kill anything for it,
/// but counts them as resident until then).
pub(crate) async fn w6(client: &Client, args: &Args) -> Result<Vec<Figure>> {
    let bundle = chain("w6", 10)
        .setting("durability", args.durability.as_str())
        .bundle();
    let mut samples = Vec::new();
    let mut resident = Vec::new();
    let mut cpu = Vec::new();
    for batch in 1..=args.batches {
        let started = Instant::now();
        let cpu_before = cpu_time();
        let mut runs = tokio::task::JoinSet::new();
        for _ in 0..args.runs {
            let (client, bundle) = (client.clone(), bundle.clone());
            runs.spawn(async move {
                let run = client.submit_bundle(bundle, &json!({})).await?;
                let done = client.wait(&run.run_id).await?;
                ensure!(
                    done.state["counter"] == json!(10),
                    "run {} lost work: {:?}",
                    run.run_id,
                    done.error
                );
                anyhow::Ok(())
            });
        }
        while let Some(done) = runs.join_next().await {
            done??;
        }
        let elapsed = started.elapsed();
        let cpu_per_run = (cpu_time() - cpu_before) / args.runs as u32;
        let (rss, lazy) = (memory_kb("VmRSS:"), lazily_freed_kb());
        eprintln!(
            "W6 batch {batch}: {:.0} runs/s, {} µs of CPU a run, resident {} MB of which {} MB freed lazily (peak {} MB)",
            args.runs as f64 / elapsed.as_secs_f64(),
            cpu_per_run.as_micros(),
            rss / 1024,
            lazy / 1024,
            memory_mb("VmHWM:")
        );
        samples.push(elapsed);
        resident.push(rss.saturating_sub(lazy));
        cpu.push(cpu_per_run);
    }
    let rate = args.runs as f64 / median(&samples).as_secs_f64();
    let soak = (args.batches >= 10).then(|| soak(args, &samples, &resident, &cpu));
    let figure = Figure {
        id: "w6".into(),
        label: format!(
            "W6 {} concurrent 10-node runs × {} batches, peak RSS {} MB",
            args.runs,
            args.batches,
            memory_mb("VmHWM:")
        ),
        samples,
        per: Some((rate, "runs/s")),
    };
    Ok([figure].into_iter().chain(soak).collect())
}

/// The soak's figure: resident KB per finished run kept after warm-up.
/// Its label gives the rates and the CPU time a run took (the whole
/// process's: client, coordinator and workers) in the first and last
/// quarters: CPU time drifts less than the rate on a shared machine.
fn soak(args: &Args, samples: &[Duration], resident: &[u64], cpu: &[Duration]) -> Figure {
    let quarter = samples.len() / 4;
    let rate = |batches: &[Duration]| args.runs as f64 / median(batches).as_secs_f64();
    let cpu_us = |batches: &[Duration]| median(batches).as_micros();
    let warm = resident[quarter - 1];
    let last = resident[resident.len() - 1];
    let runs = (resident.len() - quarter) * args.runs;
    let per_run = last.saturating_sub(warm) as f64 / runs as f64;
    Figure {
        id: "w6_soak".into(),
        label: format!(
            "W6 soak, {} runs: {:.0} runs/s in the first quarter, {:.0} in the last; CPU a run {} µs in the first quarter, {} µs in the last; resident (less lazily freed) {} MB after the first quarter, {} MB at the end; KB per run kept",
            args.runs * samples.len(),
            rate(&samples[..quarter]),
            rate(&samples[samples.len() - quarter..]),
            cpu_us(&cpu[..quarter]),
            cpu_us(&cpu[cpu.len() - quarter..]),
            warm / 1024,
            last / 1024
        ),
        samples: samples.to_vec(),
        per: Some((per_run, "KB/run")),
    }
}

/// The CPU time the process has used so far, user and system.
fn cpu_time() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    usage.map_or(Duration::ZERO, |usage| {
        let time = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec().max(0) as u64)
                + Duration::from_micros(t.tv_usec().max(0) as u64)
        };
        time(usage.user_time()) + time(usage.system_time())
    })
}

/// A `/proc/self/status` memory figure (`VmRSS:`, `VmHWM:`) in MB.
fn memory_mb(key: &str) -> u64 {
    memory_kb(key) / 1024
}

/// The pages freed lazily (`MADV_FREE`) that the kernel has not taken back
/// yet, in KB: counted in the resident set, but the kernel's to take.
fn lazily_freed_kb() -> u64 {
    proc_kb("/proc/self/smaps_rollup", "LazyFree:")
}

/// A `/proc/self/status` memory figure in KB.
fn memory_kb(key: &str) -> u64 {
    proc_kb("/proc/self/status", key)
}

/// The figure on the line of `file` that starts with `key`, in KB (0 if
/// there is none).
fn proc_kb(file: &str, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with(key))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(0)
}
