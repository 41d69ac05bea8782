//! `weft group`: the group of coordinators as the one asked sees it — its
//! partition count and, in a partitioned group, each coordinator with the
//! partitions it leads and the runs each holds.

use weft_client::{Client, ClientError, GroupInfo, PartitionLed};

use super::terminal::out;

/// Prints the group (lines, or with `--json` one object).
pub async fn show(client: &Client, as_json: bool) -> Result<(), ClientError> {
    let group = client.group().await?;
    if as_json {
        out!("{}", to_json(&group));
        return Ok(());
    }
    for line in lines(&group) {
        out!("{line}");
    }
    Ok(())
}

/// The group as `--json` prints it: the API's `/api/v1/group`.
fn to_json(group: &GroupInfo) -> serde_json::Value {
    serde_json::to_value(group).unwrap_or_default()
}

/// The group in lines: a summary, then one line per coordinator.
fn lines(group: &GroupInfo) -> Vec<String> {
    if group.partitions <= 1 {
        return vec![
            "1 partition: one coordinator leads every run (a lone coordinator, or a leader and its standbys)"
                .to_owned(),
        ];
    }
    let led: usize = group.members.iter().map(|m| m.partitions.len()).sum();
    let mut lines = vec![format!(
        "{} partitions, {led} led by {} coordinator{}",
        group.partitions,
        group.members.len(),
        if group.members.len() == 1 { "" } else { "s" }
    )];
    for member in &group.members {
        let mut line = member.url.clone();
        if member.asked {
            line.push_str(" (this coordinator)");
        }
        if !member.answered {
            line.push_str(" (not answering: partitions by the group's view)");
        }
        let partitions: Vec<String> = member.partitions.iter().map(partition).collect();
        line.push_str(&format!(
            "  leads {}: {}",
            member.partitions.len(),
            partitions.join(", ")
        ));
        lines.push(line);
    }
    if !group.unled.is_empty() {
        let unled: Vec<String> = group.unled.iter().map(u32::to_string).collect();
        lines.push(format!("not led at the moment: {}", unled.join(", ")));
    }
    lines
}

/// A partition led, in words: `3 (12 runs)`, `4 (restoring)`.
fn partition(led: &PartitionLed) -> String {
    let mut said = Vec::new();
    if let Some(runs) = led.runs {
        said.push(format!("{runs} run{}", if runs == 1 { "" } else { "s" }));
    }
    if led.restoring {
        said.push("restoring".to_owned());
    }
    match said.is_empty() {
        true => led.partition.to_string(),
        false => format!("{} ({})", led.partition, said.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use weft_client::GroupMember;

    use super::*;

    #[test]
    fn a_group_reads_as_a_summary_and_a_line_per_coordinator() {
        let group = GroupInfo {
            partitions: 4,
            members: vec![
                GroupMember {
                    url: "https://a:7700".into(),
                    partitions: vec![
                        PartitionLed {
                            partition: 0,
                            runs: Some(12),
                            restoring: false,
                        },
                        PartitionLed {
                            partition: 2,
                            runs: Some(1),
                            restoring: true,
                        },
                    ],
                    answered: true,
                    asked: true,
                },
                GroupMember {
                    url: "https://b:7700".into(),
                    partitions: vec![PartitionLed {
                        partition: 1,
                        runs: None,
                        restoring: false,
                    }],
                    answered: false,
                    asked: false,
                },
            ],
            unled: vec![3],
        };
        assert_eq!(
            lines(&group),
            [
                "4 partitions, 3 led by 2 coordinators",
                "https://a:7700 (this coordinator)  leads 2: 0 (12 runs), 2 (1 run, restoring)",
                "https://b:7700 (not answering: partitions by the group's view)  leads 1: 1",
                "not led at the moment: 3",
            ]
        );
        let shown = to_json(&group);
        assert_eq!(shown["members"][0]["partitions"][0]["runs"], 12);
        assert_eq!(shown["members"][0]["this"], true);
        assert_eq!(shown["unled"], serde_json::json!([3]));
        assert!(shown["members"][1]["partitions"][0].get("runs").is_none());
        let lone = GroupInfo {
            partitions: 1,
            members: Vec::new(),
            unled: Vec::new(),
        };
        assert!(lines(&lone)[0].starts_with("1 partition: one coordinator leads every run"));
    }
}
