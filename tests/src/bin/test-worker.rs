//! A custom worker with Rust handlers, used by the multi-process tests and
//! shown in docs/workers.md as an example of the worker SDK.

use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weft_worker::{Output, TaskContext, Worker};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    coordinator: String,
    #[arg(long)]
    name: String,
    #[arg(long, default_value_t = 2)]
    slots: u32,
    /// Host only these handlers (comma-separated); default: all.
    #[arg(long)]
    only: Option<String>,
    /// Scratch and cache directory.
    #[arg(long)]
    work_dir: Option<std::path::PathBuf>,
    /// A model provider's base URL, for `llm` and `agent` steps.
    #[arg(long)]
    llm_url: Option<String>,
    /// Its API key.
    #[arg(long)]
    llm_key: Option<String>,
    /// The worker token, for a coordinator that wants identities.
    #[arg(long, env = "WEFT_WORKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// etcd endpoints of a group of coordinators, where the worker finds
    /// them instead of at `--coordinator`.
    #[arg(long, value_delimiter = ',')]
    etcd: Vec<String>,
}

#[derive(Deserialize)]
struct Counter {
    counter: i64,
}

#[derive(Serialize)]
struct CounterUpdate {
    counter: i64,
}

#[derive(Deserialize)]
struct Delay {
    #[serde(default)]
    delay_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    weft_process::init_logging(weft_process::LogFormat::Text);
    let keep = |name: &str| {
        args.only
            .as_deref()
            .is_none_or(|only| only.split(',').any(|h| h == name))
    };
    let mut worker = Worker::new(args.coordinator.clone());
    worker
        .name(args.name.clone())
        .slots(args.slots)
        .scripts(true);
    if let Some(dir) = args.work_dir.clone() {
        worker.work_dir(dir);
    }
    if !args.etcd.is_empty() {
        worker.etcd(args.etcd.clone());
    }
    if let Some(token) = &args.token {
        worker.token(token)?;
    }
    register_handlers(&mut worker, &args.name, keep);
    if let Some(url) = &args.llm_url {
        let table = weft_worker::llm::ProviderConfig {
            base_url: url.clone(),
            api_key: args.llm_key.clone(),
            model: Some("tiny".into()),
            ..Default::default()
        };
        let tables = std::collections::BTreeMap::from([("default".to_owned(), table)]);
        let providers =
            weft_worker::llm::Providers::new(tables, |_| None, &weft_worker::Secrets::default())?;
        worker.providers(providers);
    }
    // A tool agents may call (unless `--only` leaves it out).
    if keep("lookup") {
        register_lookup(&mut worker);
    }
    worker.function("longest", |args| {
        let branches = args
            .get(1)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(branches
            .into_iter()
            .max_by_key(|v| v.as_str().map_or(0, str::len))
            .unwrap_or(Value::Null))
    });
    // A loop's `until`: done once the text is at most 20 characters, with
    // a reason the next iteration gets as its feedback.
    worker.function("short_enough", |args| {
        let iteration = args.first().cloned().unwrap_or(Value::Null);
        let length = iteration["output"].as_str().map_or(usize::MAX, str::len);
        if length <= 20 {
            return Ok(json!(true));
        }
        Ok(json!([false, format!("{length} characters, over 20")]))
    });
    let shutdown = weft_process::shutdown_on_signal();
    worker.run(shutdown).await?;
    Ok(())
}

/// `lookup`: looks a key up in a fixed table; the context's scope and
/// attempt are in its answer when it is asked for key `ctx`.
fn register_lookup(worker: &mut Worker) {
    worker.tool(
        "lookup",
        "Look a key up in the reference table.",
        json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        |arguments, ctx| async move {
            match arguments["key"].as_str() {
                Some("a") => Ok(json!("alpha")),
                Some("b") => Ok(json!("beta")),
                Some("ctx") => Ok(json!({
                    "node": ctx.node.as_str(),
                    "attempt": ctx.attempt,
                    "item": ctx.item,
                    "scope": ctx.scope,
                    "task_key": ctx.task_key(),
                })),
                other => Err(format!("no entry for {other:?}").into()),
            }
        },
    );
}

/// The test handlers, those `keep` accepts; `name` is this worker's name,
/// which some handlers report.
fn register_handlers(worker: &mut Worker, name: &str, keep: impl Fn(&str) -> bool) {
    if keep("increment") {
        worker.handler("increment", |s: Counter, _| async move {
            Ok::<_, String>(CounterUpdate {
                counter: s.counter + 1,
            })
        });
    }
    if keep("double") {
        let me = name.to_owned();
        worker.handler("double", move |s: Delay, ctx: TaskContext| {
            let me = me.clone();
            async move {
                let item: i64 = ctx.scope("item")?;
                // Tests read this line to learn when items start, and where.
                eprintln!("{me} started item {item}");
                tokio::time::sleep(Duration::from_millis(s.delay_ms)).await;
                Ok::<_, String>(json!({"doubled": item * 2, "worker": me}))
            }
        });
    }
    if keep("tag") {
        let me = name.to_owned();
        worker.handler("tag", move |_: serde::de::IgnoredAny, ctx: TaskContext| {
            let me = me.clone();
            async move { Ok::<_, String>(json!({"tagged": {"node": ctx.node, "worker": me}})) }
        });
    }
    if keep("sleep") {
        worker.handler("sleep", |s: Delay, _| async move {
            tokio::time::sleep(Duration::from_millis(s.delay_ms)).await;
            Ok::<_, String>(json!({"slept": s.delay_ms}))
        });
    }
    if keep("fail") {
        worker.handler("fail", |_: serde::de::IgnoredAny, _| async move {
            Err::<Value, _>("deliberate failure")
        });
    }
    if keep("late") {
        worker.handler("late", |_: serde::de::IgnoredAny, _| async move {
            Ok::<_, String>(json!({"late": "done"}))
        });
    }
    if keep("converse") {
        let me = name.to_owned();
        worker.handler("converse", move |_: serde::de::IgnoredAny, ctx| {
            converse(me.clone(), ctx)
        });
    }
    if keep("pass_along") {
        // A ring: each item sends its successor a message, then returns
        // the one its predecessor sent and the worker it ran on (the
        // Python SDK's tests run it beside a Python worker's own).
        let me = name.to_owned();
        worker.handler(
            "pass_along",
            move |_: serde::de::IgnoredAny, ctx: TaskContext| {
                let me = me.clone();
                async move {
                    let team = ctx.team.clone().ok_or("pass_along needs a team")?;
                    let members = team.members();
                    let at = members
                        .iter()
                        .position(|m| m == team.me())
                        .ok_or("not a member of its own team")?;
                    let next = &members[(at + 1) % members.len()];
                    ctx.send(next, json!({"from": team.me()}))
                        .await
                        .map_err(|e| e.to_string())?;
                    let got = ctx
                        .recv(Duration::from_secs(30))
                        .await
                        .ok_or("no message came")?;
                    Ok::<_, String>(json!({"passed": {"got": got.content, "by": me}}))
                }
            },
        );
    }
    if keep("relay") {
        worker.handler(
            "relay",
            |_: serde::de::IgnoredAny, ctx: TaskContext| async move {
                let team = ctx.team.clone().ok_or("relay needs a team")?;
                if team.me() == team.members()[0] {
                    ctx.send(&team.members()[1], "passed on")
                        .await
                        .map_err(|e| e.to_string())?;
                    return Ok::<_, String>(json!({"got": null}));
                }
                let message = ctx.recv(Duration::from_secs(10)).await;
                Ok(json!({"got": message.map(|m| m.content)}))
            },
        );
    }
    if keep("measure") {
        // A map names no field: it reads the whole state.
        worker.handler(
            "measure",
            |s: serde_json::Map<String, Value>, _| async move {
                let length = s.get("blob").and_then(Value::as_str).map_or(0, str::len);
                Ok::<_, String>(json!({"blob_length": length}))
            },
        );
    }
    if keep("gate") {
        worker.routing_handler("gate", |s: Counter, _| async move {
            let next = if s.counter >= 3 { "finish" } else { "again" };
            Output::update(json!({"gate": next})).map(|o| o.next(next))
        });
    }
}

/// A teammate: greets every other member, then waits for each of theirs.
/// Returns who it heard from, the worker it ran on, and what sending to a
/// stranger said.
async fn converse(worker: String, ctx: TaskContext) -> Result<Value, String> {
    let team = ctx.team.clone().ok_or("converse needs a team")?;
    let others: Vec<String> = team
        .members()
        .iter()
        .filter(|m| *m != team.me())
        .cloned()
        .collect();
    for other in &others {
        ctx.send(other, json!({"hello_from": team.me()}))
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut heard = Vec::new();
    while heard.len() < others.len() {
        let message = ctx
            .recv(Duration::from_secs(30))
            .await
            .ok_or_else(|| format!("{} heard only from {heard:?}", team.me()))?;
        heard.push(message.from);
    }
    heard.sort();
    let stranger = ctx.send("nobody/0", 1).await.err().map(|e| e.to_string());
    Ok(json!({"heard": heard, "me": team.me(), "worker": worker, "stranger": stranger}))
}
