//! `weft runs`: a page of runs, newest first, each with its status, graph,
//! start time and duration, optionally only those of a status or a graph.
//! Filters are applied to the coordinator's pages as they come, so a page
//! of `--limit` matching runs may take several of its pages.

use serde_json::Value;
use weft_client::{Client, ClientError, RunInfo, RunStatus};

use super::terminal::{err, out};

/// What `weft runs` shows.
pub struct Listing<'a> {
    /// `--limit`.
    pub limit: u32,
    /// `--after`.
    pub after: Option<&'a str>,
    /// `--status`.
    pub status: Option<RunStatus>,
    /// `--graph`.
    pub graph: Option<&'a str>,
    /// `--json`.
    pub json: bool,
}

/// A status word of `--status`.
pub fn parse_status(text: &str) -> Result<RunStatus, String> {
    RunStatus::from_name(&text.trim().to_ascii_lowercase()).ok_or_else(|| {
        format!("'{text}' is not a status (running, waiting, completed, failed, cancelled)")
    })
}

/// Up to `limit` runs that pass the filters, and the last of them when
/// more matching runs remain (the next page starts after it).
async fn matching(
    client: &Client,
    listing: &Listing<'_>,
) -> Result<(Vec<RunInfo>, Option<String>), ClientError> {
    let wanted = |run: &RunInfo| {
        listing.status.is_none_or(|s| run.status == s)
            && listing.graph.is_none_or(|g| run.graph_name == g)
    };
    let limit = listing.limit as usize;
    let mut found: Vec<RunInfo> = Vec::new();
    let mut after = listing.after.map(str::to_owned);
    loop {
        let (page, next) = client.list_page(listing.limit, after.as_deref()).await?;
        for run in page.into_iter().filter(|run| wanted(run)) {
            if found.len() == limit {
                let last = found.last().map(|r| r.run_id.to_string());
                return Ok((found, last));
            }
            found.push(run);
        }
        match next {
            Some(next) => after = Some(next),
            None => return Ok((found, None)),
        }
    }
}

/// Prints the runs (a table, or with `--json` one object).
pub async fn show(client: &Client, listing: &Listing<'_>) -> Result<(), ClientError> {
    let (runs, next) = matching(client, listing).await?;
    let now = now_ms();
    if listing.json {
        let runs: Vec<Value> = runs
            .iter()
            .map(|run| {
                let mut row = serde_json::json!({
                    "run_id": run.run_id,
                    "status": run.status.name(),
                    "graph": run.graph_name,
                    "started": rfc3339(run.created_unix_ms),
                    "duration_ms": duration_ms(run, now),
                });
                if !run.usage.is_empty() {
                    row["usage"] = serde_json::json!(run.usage);
                }
                row
            })
            .collect();
        out!("{}", serde_json::json!({ "runs": runs, "next": next }));
        return Ok(());
    }
    for run in &runs {
        out!(
            "{}  {:<9}  {:<24}  {}  {}{}",
            run.run_id,
            run.status.name(),
            run.graph_name,
            rfc3339(run.created_unix_ms),
            human_duration(duration_ms(run, now)),
            usage_column(&run.usage),
        );
    }
    if let Some(next) = next {
        let mut again = format!("weft runs --after {next}");
        if let Some(status) = listing.status {
            again.push_str(&format!(" --status {}", status.name()));
        }
        if let Some(graph) = listing.graph {
            again.push_str(&format!(" --graph {graph}"));
        }
        err!("(more: {again})");
    }
    Ok(())
}

/// `  1,290 tokens  0.0041` for a run whose steps called models; nothing
/// for one that called none.
fn usage_column(usage: &weft_proto::types::Usage) -> String {
    if usage.is_empty() {
        return String::new();
    }
    let tokens = usage.prompt_tokens + usage.completion_tokens;
    match usage.cost {
        Some(cost) => format!("  {tokens} tokens  {cost:.4}"),
        None => format!("  {tokens} tokens"),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How long the run took, or has taken so far.
fn duration_ms(run: &RunInfo, now: i64) -> i64 {
    (run.ended_unix_ms.unwrap_or(now) - run.created_unix_ms).max(0)
}

/// `850ms`, `12.3s`, `4m05s`, `2h07m`.
fn human_duration(ms: i64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

/// `2026-12-01T19:30:05Z` for Unix milliseconds (UTC).
fn rfc3339(unix_ms: i64) -> String {
    let seconds = unix_ms.div_euclid(1000);
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        (of_day / 60) % 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_as_people_write_them() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_154_605_000), "2026-12-01T19:50:05Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(human_duration(850), "850ms");
        assert_eq!(human_duration(12_340), "12.3s");
        assert_eq!(human_duration(245_000), "4m05s");
        assert_eq!(human_duration(7_620_000), "2h07m");
        assert_eq!(parse_status("Completed"), Ok(RunStatus::Completed));
        assert!(
            parse_status("done")
                .unwrap_err()
                .contains("running, waiting")
        );
    }
}
