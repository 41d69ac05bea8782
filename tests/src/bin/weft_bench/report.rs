//! What a workload measured, and how the harness prints it: a Markdown
//! table for people, then one JSON line per workload in the peers' format
//! (`engine`, `workload`, `median_s`, `times_s`, …) for the comparison
//! scripts.

use std::time::Duration;

use serde_json::json;

/// One workload's samples and its headline figure.
pub(crate) struct Figure {
    /// What the comparison reads it by: the workload and its case
    /// (`w2_1000`, `w4_one`, `w8_loop`).
    pub(crate) id: String,
    pub(crate) label: String,
    pub(crate) samples: Vec<Duration>,
    pub(crate) per: Option<(f64, &'static str)>,
}

/// The median of `samples` (the upper one of an even count).
pub(crate) fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// Prints the table, then the JSON lines.
pub(crate) fn print(figures: &[Figure]) {
    println!("| workload | median | figure | samples |");
    println!("|---|---|---|---|");
    for figure in figures {
        let m = median(&figure.samples);
        let per = figure
            .per
            .map(|(v, unit)| format!("{v:.1} {unit}"))
            .unwrap_or_else(|| "—".into());
        // Sub-millisecond figures (W7's messages) read better in µs.
        let (scale, unit) = if m < Duration::from_millis(1) {
            (1e6, "µs")
        } else {
            (1e3, "ms")
        };
        let samples: Vec<String> = figure
            .samples
            .iter()
            .take(10)
            .map(|d| format!("{:.1}", d.as_secs_f64() * scale))
            .collect();
        let more = if figure.samples.len() > 10 {
            ", …"
        } else {
            ""
        };
        println!(
            "| {} | {:.1} {unit} | {per} | {}{more} {unit} |",
            figure.label,
            m.as_secs_f64() * scale,
            samples.join(", ")
        );
    }
    for figure in figures {
        let line = json!({
            "engine": "weft",
            "workload": figure.id,
            "label": figure.label,
            "median_s": median(&figure.samples).as_secs_f64(),
            "times_s": figure.samples.iter().take(100).map(Duration::as_secs_f64).collect::<Vec<_>>(),
            "figure": figure.per.map(|(v, _)| v),
            "unit": figure.per.map(|(_, u)| u),
        });
        println!("{line}");
    }
}
