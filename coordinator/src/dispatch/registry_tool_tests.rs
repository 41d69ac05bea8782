//! Placement of agent steps whose registered tools other workers host,
//! and of the tool calls themselves.

use super::*;

/// A worker with a model (the `agent` kind) and the tools `tools`.
fn agent_worker(name: &str, tools: &[&str]) -> WorkerInfo {
    let mut info = worker(name, 1, &[]);
    info.hello.kinds = vec![WorkerKind::Agent];
    info.hello.tools = tools
        .iter()
        .map(|tool| ToolInfo {
            name: (*tool).to_owned(),
            description: String::new(),
            parameters: ToolInfo::any_arguments(),
        })
        .collect();
    info
}

/// A worker with no model that hosts the tools `tools`.
fn tool_worker(name: &str, tools: &[&str]) -> WorkerInfo {
    let mut info = agent_worker(name, tools);
    info.hello.kinds = Vec::new();
    info
}

fn agent_task(key: u64, tools: &[&str]) -> JobSpec<u64> {
    JobSpec {
        requirement: Requirement::Agent(tools.iter().map(|t| (*t).to_owned()).collect()),
        ..task(key)
    }
}

#[test]
fn an_agent_waits_until_some_worker_hosts_each_of_its_tools() {
    let now = Instant::now();
    let mut reg = registry();
    let brain = reg.join(agent_worker("brain", &[]), now).unwrap();
    let decisions = reg.submit(agent_task(1, &["lookup", "search"]));
    assert!(
        decisions
            .iter()
            .any(|d| matches!(d, Decision::Unhosted { .. })),
        "nobody hosts its tools: its run is told"
    );
    reg.join(tool_worker("hands", &["lookup"]), now).unwrap();
    assert!(
        reg.place(now).is_empty(),
        "'search' is still hosted nowhere"
    );
    assert_eq!(reg.load().unhosted, 1);
    let more = reg
        .join(tool_worker("more-hands", &["search"]), now)
        .unwrap();
    // The agent runs where the model is; its tools stay where they are.
    assert_eq!(sends(&reg.place(now)), vec![(brain, 1)]);
    assert_eq!(
        reg.tool("default", "search").map(|t| t.name.as_str()),
        Some("search")
    );
    reg.drain(more);
    assert!(
        reg.tool("default", "search").is_none(),
        "a draining worker takes no tool calls"
    );
}

#[test]
fn an_agent_goes_first_to_a_worker_that_hosts_its_tools_itself() {
    let now = Instant::now();
    let mut reg = registry();
    let bare = reg.join(agent_worker("bare", &[]), now).unwrap();
    let equipped = reg
        .join(agent_worker("equipped", &["lookup"]), now)
        .unwrap();
    reg.submit(agent_task(1, &["lookup"]));
    reg.submit(agent_task(2, &["lookup"]));
    // `bare` would win a tie by id; the one with the tool goes first, and
    // the next agent goes to `bare`, its tool called on `equipped`.
    assert_eq!(sends(&reg.place(now)), vec![(equipped, 1), (bare, 2)]);
}

#[test]
fn a_tool_call_takes_no_slot_on_its_host() {
    let now = Instant::now();
    let mut reg = registry();
    let hands = reg.join(agent_worker("hands", &["lookup"]), now).unwrap();
    reg.submit(agent_task(1, &["lookup"]));
    assert_eq!(sends(&reg.place(now)), vec![(hands, 1)]);
    reg.submit(JobSpec {
        id: JobId {
            run: RunId::from("run"),
            key: JobKey::Tool(1),
        },
        requirement: Requirement::Tool("lookup".into()),
        ..task(2)
    });
    let placed = reg.place(now);
    assert!(
        matches!(&placed[..], [Decision::Send { worker, job: JobId { key: JobKey::Tool(1), .. } }] if *worker == hands),
        "{placed:?}"
    );
    assert_eq!(reg.workers()[0].in_flight, 1, "only the agent holds a slot");
}
