//! Commands that talk to a coordinator.

use super::terminal::{err, out};

use std::io::IsTerminal;
use std::path::Path;

use serde_json::{Map, Value};
use weft_client::{BundleError, Client, ClientError, GraphBundle, HistoryPoint, RunStatus};
use weft_graph::GraphError;

use super::connect::report;
use super::session::{Place, Session};
use super::{exit, output, progress, prompt};

/// Options of `weft run`.
pub struct RunOptions {
    /// `--input`.
    pub input: Option<String>,
    /// `--json`.
    pub json: bool,
    /// `--watch`.
    pub watch: bool,
    /// `--workers`.
    pub workers: u32,
    /// `--detach`.
    pub detach: bool,
    /// `--allow-outside-links`.
    pub allow_outside_links: bool,
    /// `--priority`.
    pub priority: Option<weft_graph::Priority>,
    /// `--no-cache`.
    pub no_cache: bool,
}

/// `weft run`.
pub async fn run(coordinator: Option<String>, graph: &Path, options: RunOptions) -> u8 {
    let bundle_options = weft_client::BundleOptions {
        allow_outside_links: options.allow_outside_links,
    };
    let bundle = match GraphBundle::from_file_with(graph, bundle_options) {
        Ok(bundle) => bundle,
        Err(BundleError::Graph(GraphError::Invalid(findings))) => {
            for finding in findings {
                err!("{finding}");
            }
            return exit::INVALID;
        }
        Err(error) => {
            err!("error: {error}");
            return exit::INVALID;
        }
    };
    let input = match read_input(options.input.as_deref()) {
        Ok(input) => input,
        Err(message) => {
            err!("error: {message}");
            return exit::INVALID;
        }
    };
    if options.detach && coordinator.is_none() {
        err!(
            "error: --detach needs --coordinator (the local cluster serves only while a weft command runs)"
        );
        return exit::INVALID;
    }
    let session = match open(coordinator, options.workers, true).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = submit_and_wait(&session, bundle, &input, &options).await;
    session.close(true).await;
    code
}

/// Whether `--ephemeral` (`WEFT_EPHEMERAL`) was given.
static EPHEMERAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Sets `--ephemeral` for this invocation.
pub fn set_ephemeral(ephemeral: bool) {
    let _ = EPHEMERAL.set(ephemeral);
}

/// Where this command's runs are: `coordinator`, else the local cluster
/// (started with `workers` if nobody runs it), else, with `--ephemeral`,
/// a temporary cluster for `weft run` (`for_run`) and nothing otherwise.
async fn open(coordinator: Option<String>, workers: u32, for_run: bool) -> Result<Session, u8> {
    let ephemeral = EPHEMERAL.get().copied().unwrap_or(false);
    if coordinator.is_none() && ephemeral && !for_run {
        err!(
            "error: no coordinator: pass --coordinator URL or set WEFT_COORDINATOR (with --ephemeral, or WEFT_EPHEMERAL, runs are not kept, so there is no local cluster to ask)"
        );
        return Err(exit::UNREACHABLE);
    }
    Session::open(Place::of(coordinator, ephemeral, workers)).await
}

/// The workers a local cluster started by a command other than `run` has.
const LOCAL_WORKERS: u32 = 2;

async fn submit_and_wait(
    session: &Session,
    bundle: GraphBundle,
    input: &Map<String, Value>,
    options: &RunOptions,
) -> u8 {
    let client = &session.client;
    let submit = weft_client::SubmitOptions {
        priority: options.priority,
        no_cache: options.no_cache,
    };
    let submitted = match client.submit_bundle_with(bundle, input, submit).await {
        Ok(submitted) => submitted,
        Err(error) => return report(&error),
    };
    for warning in &submitted.warnings {
        err!("{warning}");
    }
    let run_id = submitted.run_id;
    if options.detach {
        if options.json {
            out!("{}", serde_json::json!({ "run_id": run_id }));
        } else {
            out!("{run_id}");
        }
        return exit::OK;
    }
    // Said at once (SPEC 12), so the run can be found whatever happens next.
    err!("run {run_id} accepted");
    let interactive = !options.json && std::io::stdin().is_terminal();
    let mut from = 0;
    loop {
        let waited = async {
            if options.watch {
                progress::follow(client, &run_id, from, false).await
            } else {
                client.wait(&run_id).await
            }
        };
        // Ctrl-C stops the waiting, not the run (on a coordinator of its own).
        let result = tokio::select! {
            result = waited => result,
            _ = tokio::signal::ctrl_c() => {
                match session.local_home() {
                    _ if session.ephemeral() => err!(
                        "stopped: the ephemeral cluster stops with this command, and run {run_id} with it"
                    ),
                    Some(home) => err!(
                        "stopped waiting; run {run_id} is kept in {}: `weft watch {run_id}` continues it, `weft cancel {run_id}` stops it",
                        home.display()
                    ),
                    None => err!(
                        "stopped waiting; run {run_id} goes on: `weft watch {run_id}` follows it, `weft cancel {run_id}` stops it"
                    ),
                }
                return exit::INTERRUPTED;
            }
        };
        let info = match result {
            Ok(info) => info,
            Err(error) => return report(&error),
        };
        from = info.event_count;
        if info.status != RunStatus::Waiting || !interactive {
            return output::show(&info, options.json);
        }
        for waiting in info.waiting {
            let node = waiting.node.clone();
            let Some(answer) = prompt::ask(waiting).await else {
                return output::show(
                    &client.get(&run_id).await.unwrap_or(info_fallback(&run_id)),
                    options.json,
                );
            };
            if let Err(error) = client
                .resume(&run_id, &node, &answer.value, answer.comment.as_deref())
                .await
            {
                err!("error: {error}");
            }
        }
    }
}

fn info_fallback(run_id: &str) -> weft_client::RunInfo {
    weft_client::RunInfo {
        run_id: run_id.into(),
        graph_name: String::new(),
        status: RunStatus::Waiting,
        state: Value::Object(Map::new()),
        error: None,
        waiting: Vec::new(),
        unhosted: Vec::new(),
        children: Vec::new(),
        event_count: 0,
        created_unix_ms: 0,
        ended_unix_ms: None,
        namespace: String::new(),
        submitted_by: String::new(),
        forked_from: None,
        answers: Vec::new(),
        usage: Default::default(),
        trace_id: String::new(),
    }
}

/// `weft status`.
pub async fn status(coordinator: Option<String>, run: &str, json: bool) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match session.client.get(run).await {
        Ok(info) => {
            output::show(&info, json);
            exit::OK
        }
        Err(error) => report(&error),
    };
    session.close(false).await;
    code
}

/// `--set FIELD=JSON` values as fields; a value that is not JSON is a
/// string (as `weft resume` takes answers).
fn fields_set(set: &[String]) -> Result<Map<String, Value>, String> {
    let mut fields = Map::new();
    for item in set {
        let (field, text) = item
            .split_once('=')
            .filter(|(field, _)| !field.is_empty())
            .ok_or_else(|| format!("--set {item}: give FIELD=JSON"))?;
        let value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
        fields.insert(field.to_owned(), value);
    }
    Ok(fields)
}

/// `weft fork`: a new run from a run's state at a place in its history
/// (SPEC 20).
pub async fn fork(
    coordinator: Option<String>,
    run: &str,
    at: Option<HistoryPoint>,
    set: &[String],
    json: bool,
) -> u8 {
    let fields = match fields_set(set) {
        Ok(fields) => fields,
        Err(message) => {
            err!("error: {message}");
            return exit::INVALID;
        }
    };
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match session.client.fork(run, at, &fields).await {
        Ok(forked) => {
            for warning in &forked.warnings {
                err!("{warning}");
            }
            let id = forked.run_id.to_string();
            let info = session.client.status(&id).await.ok();
            let from = info.as_ref().and_then(|info| info.forked_from.clone());
            if json {
                let shown = serde_json::json!({
                    "run_id": id,
                    "forked_from": from.map(|from| serde_json::json!({
                        "run": from.run,
                        "step": from.step,
                        "point": from.point,
                        "at": from.at().to_string(),
                    })),
                });
                out!("{shown}");
            } else {
                match from {
                    // A child run's fork is its parent's: say so.
                    Some(from) if from.run.as_str() != run => err!(
                        "run {id} forked from {} {} (the parent of run {run}, whose fork it takes on)",
                        from.run,
                        output::place_in_words(from.at())
                    ),
                    Some(from) => err!(
                        "run {id} forked from {run} {}",
                        output::place_in_words(from.at())
                    ),
                    None => err!("run {id} forked from {run}"),
                }
                out!("{id}");
            }
            continue_locally(&session, &id).await;
            exit::OK
        }
        Err(error) => report(&error),
    };
    session.close(true).await;
    code
}

/// `weft state`: a run's state after one of its waves (SPEC 20).
pub async fn state(
    coordinator: Option<String>,
    run: &str,
    at: Option<HistoryPoint>,
    json: bool,
) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match session.client.history(run, at).await {
        Ok(history) => {
            let at = HistoryPoint {
                step: history.step,
                point: history.point,
            };
            if json {
                let shown = serde_json::json!({
                    "run_id": run,
                    "step": history.step,
                    "point": history.point,
                    "at": at.to_string(),
                    "state": history.state,
                    "waves": history.waves,
                });
                out!("{shown}");
            } else {
                let steps: Vec<u32> = history
                    .waves
                    .iter()
                    .filter(|w| w.point == 0)
                    .map(|w| w.step)
                    .collect();
                let kept = match (steps.first(), steps.last()) {
                    (Some(first), Some(last)) if first != last => format!("waves {first}–{last}"),
                    (Some(only), _) => format!("wave {only}"),
                    _ => "no wave".to_owned(),
                };
                let points: Vec<&weft_client::HistoryWave> =
                    history.waves.iter().filter(|w| w.point > 0).collect();
                let within = match points.len() {
                    0 => String::new(),
                    _ => {
                        let named: Vec<String> =
                            points.iter().map(|w| w.at().to_string()).collect();
                        format!("; points within waves: {}", named.join(", "))
                    }
                };
                let status = history
                    .waves
                    .iter()
                    .find(|w| w.at() == at)
                    .map_or("", |w| w.status.as_str());
                err!(
                    "run {run} {}, {status} then ({kept} kept{within})",
                    output::place_in_words(at)
                );
                // What each point within a wave holds, from the run's log.
                if let Some(last) = points.last() {
                    let events = log_until(&session.client, run, last.point).await;
                    let numbers: Vec<u64> = points.iter().map(|w| w.point).collect();
                    for (wave, note) in points.iter().zip(output::point_notes(&events, &numbers)) {
                        err!("  {:<12} {note}", wave.at().to_string());
                    }
                }
                out!(
                    "{}",
                    serde_json::to_string_pretty(&history.state).unwrap_or_default()
                );
            }
            exit::OK
        }
        Err(error) => report(&error),
    };
    session.close(false).await;
    code
}

/// Run `run`'s events before position `until` (fewer if the log cannot
/// be read: the notes they make are a help, not the answer).
async fn log_until(client: &Client, run: &str, until: u64) -> Vec<weft_client::Event> {
    use tokio_stream::StreamExt;
    let Ok(stream) = client.watch(run, 0).await else {
        return Vec::new();
    };
    let mut stream = std::pin::pin!(stream);
    let mut events = Vec::new();
    // Never waits for an event to come: the last one wanted is `until - 1`.
    while let Some(Ok(event)) = stream.next().await {
        let seq = event.seq;
        if seq < until {
            events.push(event);
        }
        if seq + 1 >= until {
            break;
        }
    }
    events
}

/// `weft watch`.
pub async fn watch(coordinator: Option<String>, run: &str, json: bool) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    // Like `status`, 0 for any run that exists (SPEC 12): the run's own
    // outcome is in what was shown. On the local cluster, watching a run
    // is what continues it.
    let code = match progress::follow(&session.client, run, 0, json).await {
        // With --json, stdout holds the events alone (JSON Lines).
        Ok(_) if json => exit::OK,
        Ok(info) => {
            output::show(&info, false);
            exit::OK
        }
        Err(error) => report(&error),
    };
    session.close(true).await;
    code
}

/// `weft runs`.
pub async fn runs(coordinator: Option<String>, listing: super::listing::Listing<'_>) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match super::listing::show(&session.client, &listing).await {
        Ok(()) => exit::OK,
        Err(error) => report(&error),
    };
    session.close(false).await;
    code
}

/// `weft group`.
pub async fn group(coordinator: Option<String>, json: bool) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match super::group::show(&session.client, json).await {
        Ok(()) => exit::OK,
        Err(error) => report(&error),
    };
    session.close(false).await;
    code
}

/// `weft resume`.
pub async fn resume(
    coordinator: Option<String>,
    run: &str,
    node: &str,
    value: &str,
    comment: Option<String>,
) -> u8 {
    // VALUE (or the file @FILE names) is JSON when it parses, else a
    // string (SPEC section 12); a file's one trailing newline is not part
    // of the answer.
    let text = match value.strip_prefix('@') {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => text.strip_suffix('\n').map(str::to_owned).unwrap_or(text),
            Err(source) => {
                err!("error: cannot read answer file '{path}': {source}");
                return exit::INVALID;
            }
        },
        None => value.to_owned(),
    };
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match session
        .client
        .resume(run, node, &value, comment.as_deref())
        .await
    {
        Ok(info) => {
            err!(
                "resumed {node}; run {} is {}",
                info.run_id,
                info.status.name()
            );
            continue_locally(&session, run).await;
            exit::OK
        }
        Err(error) => report(&error),
    };
    session.close(true).await;
    code
}

/// On a local cluster this command started, the run goes on only while
/// the command does: it waits for the run to end or to wait again, and
/// says how it stands.
async fn continue_locally(session: &Session, run: &str) {
    if !session.started_here() {
        return;
    }
    if let Ok(info) = session.client.wait(run).await
        && info.status != RunStatus::Running
    {
        output::show(&info, false);
    }
}

/// `weft cancel`.
pub async fn cancel(coordinator: Option<String>, run: &str) -> u8 {
    act(coordinator, run, |client, run| {
        Box::pin(async move { client.cancel(&run).await })
    })
    .await
}

/// `weft delete`.
pub async fn delete(coordinator: Option<String>, run: &str) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match session.client.delete(run).await {
        Ok(()) => {
            err!("deleted run {run}");
            exit::OK
        }
        Err(error) => report(&error),
    };
    session.close(false).await;
    code
}

/// `weft retry`.
pub async fn retry(coordinator: Option<String>, run: &str) -> u8 {
    act(coordinator, run, |client, run| {
        Box::pin(async move { client.retry(&run).await })
    })
    .await
}

type Action = fn(
    Client,
    String,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<weft_client::RunInfo, ClientError>> + Send>,
>;

async fn act(coordinator: Option<String>, run: &str, action: Action) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = match action(session.client.clone(), run.to_owned()).await {
        Ok(info) => {
            err!("run {} is {}", info.run_id, info.status.name());
            continue_locally(&session, run).await;
            exit::OK
        }
        Err(error) => report(&error),
    };
    session.close(true).await;
    code
}

/// Why `--input` cannot be used.
#[derive(Debug, thiserror::Error)]
enum InputError {
    /// `--input @FILE` names a file that cannot be read.
    #[error("cannot read input file '{path}': {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The input is JSON, but not an object.
    #[error("--input must be a JSON object")]
    NotAnObject,
    /// The input is not JSON.
    #[error("--input is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
}

fn read_input(input: Option<&str>) -> Result<Map<String, Value>, InputError> {
    let Some(input) = input else {
        return Ok(Map::new());
    };
    let text = match input.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|source| InputError::Read {
            path: path.to_owned(),
            source,
        })?,
        None => input.to_owned(),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(InputError::NotAnObject),
        Err(error) => Err(InputError::NotJson(error)),
    }
}

/// `weft index build`: on the local cluster too, which keeps the indexes
/// for the runs that follow.
pub async fn index_build(coordinator: Option<String>, graph: &Path, json: bool) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = super::indexes::build(&session, graph, json).await;
    session.close(false).await;
    code
}

/// `weft index list`.
pub async fn index_list(coordinator: Option<String>, namespace: Option<&str>, json: bool) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = super::indexes::list(&session, namespace, json).await;
    session.close(false).await;
    code
}

/// `weft index push`.
pub async fn index_push(
    coordinator: Option<String>,
    graph: &Path,
    knowledge: &str,
    to: &str,
    json: bool,
) -> u8 {
    let session = match open(coordinator, LOCAL_WORKERS, false).await {
        Ok(session) => session,
        Err(code) => return code,
    };
    let code = super::push::push(&session, graph, knowledge, to, json).await;
    session.close(false).await;
    code
}
