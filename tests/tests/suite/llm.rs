//! `llm` nodes (SPEC 4, issue #11) on `worker` processes against the
//! local OpenAI-compatible test server, over real HTTP: providers from a
//! configuration file with the API key a secret, prompts rendered,
//! structured output checked and retried, 429s waited out, timeouts and
//! malformed replies failing the attempt — and the key never shown.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_tests::TestCluster;
use weft_tests::llm_server::{Reply, TestLlm, last_message};

/// The API key: in the worker's secrets file only.
const KEY: &str = "sk-test-5ecret-k3y";

/// A cluster whose worker has the test server as its provider, its key
/// given as `${LLM_KEY}` from a secrets file.
async fn cluster(llm: &TestLlm) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    let config = cluster.dir().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.local]\nbase_url = \"{}\"\napi_key = \"${{LLM_KEY}}\"\nmodel = \"tiny\"\n",
            llm.url
        ),
    )?;
    let secrets = cluster.dir().join("secrets");
    std::fs::write(&secrets, format!("LLM_KEY={KEY}\n"))?;
    let args = [
        "--config".to_owned(),
        config.display().to_string(),
        "--secrets-file".to_owned(),
        secrets.display().to_string(),
    ];
    cluster.add_worker_with("w", 2, &args)?;
    cluster.wait_for_workers(&["w"]).await?;
    Ok(cluster)
}

async fn run(client: &Client, yaml: &str, input: Value) -> anyhow::Result<RunInfo> {
    let run = client
        .submit_bundle(GraphBundle::from_text("llm.yaml", yaml), &input)
        .await?;
    Ok(client.wait(&run.run_id).await?)
}

/// Everything a run produced that a person could see: its status and its
/// events as JSON.
async fn shown(client: &Client, run_id: &str) -> anyhow::Result<String> {
    let events: Vec<weft_client::Event> = client
        .watch(run_id, 0)
        .await?
        .collect::<Result<Vec<_>, _>>()
        .await?;
    let info = client.get(run_id).await?;
    Ok(format!("{info:?}\n{events:?}"))
}

const SUMMARY: &str = r#"
state:
  topic: { type: string }
  summary: { type: string, default: "" }
nodes:
  ask:
    kind: llm
    start: true
    system: "You answer in one line."
    prompt: "Summarise {{ topic }}."
    temperature: 0.2
    max_tokens: 50
    state_updates: { summary: "{{ output }}" }
"#;

#[tokio::test]
async fn an_llm_step_writes_its_completion_through_state_updates() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, _| {
        Reply::Text(format!("[{}]", last_message(request)))
    })
    .await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let done = run(&client, SUMMARY, json!({"topic": "weft"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["summary"], "[Summarise weft.]");
    let request = &llm.requests()[0];
    assert_eq!(request["model"], "tiny", "the provider's model");
    assert_eq!(request["temperature"], 0.2);
    assert_eq!(request["max_tokens"], 50);
    assert_eq!(
        request["messages"],
        json!([
            {"role": "system", "content": "You answer in one line."},
            {"role": "user", "content": "Summarise weft."}
        ])
    );
    assert!(request.get("response_format").is_none());
    let calls = weft_tests::events_of(&client, &done.run_id, "model_called").await?;
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body["model"], "tiny");
    assert_eq!(calls[0].body["completion_tokens"], 7);
    // Tokens and checkpoints are counted; probes answer.
    let metrics = cluster.metrics()?;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("weft_llm_tokens_total{")
                && line.contains("namespace=\"default\"")
                && line.contains("provider=\"local\"")
                && line.contains("model=\"tiny\"")
                && line.contains("type=\"completion\"")
                && line.ends_with(" 7")),
        "{metrics}"
    );
    assert!(
        metrics.contains("weft_checkpoint_seconds_bucket{le=\"+Inf\"}"),
        "{metrics}"
    );
    // The worker reads the prompts rendered by the coordinator, never the
    // state: no field crossed.
    assert!(
        metrics
            .lines()
            .any(|l| l == "weft_state_bytes_sent_total 0"),
        "{metrics}"
    );
    assert_eq!(cluster.metrics_endpoint("healthz")?, "ok\n");
    assert_eq!(cluster.metrics_endpoint("readyz")?, "ok\n");
    let everything =
        shown(&client, &done.run_id).await? + &cluster.log("w") + &cluster.log("coordinator");
    assert!(!everything.contains(KEY), "the API key leaked");
    Ok(())
}

#[tokio::test]
async fn structured_output_that_breaks_the_schema_is_a_failed_attempt_and_retried()
-> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, n| match n {
        0 => Reply::Json(json!({"scor": 1})),
        1 => Reply::Text("I think it is good".into()),
        _ => Reply::Json(json!({"score": 0.9, "reason": "clear"})),
    })
    .await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let yaml = r#"
state:
  score: { type: number, default: 0 }
  reason: { type: string, default: "" }
nodes:
  grade:
    kind: llm
    start: true
    model: judge
    prompt: "Grade it."
    retry: { max_attempts: 3, initial_interval: 0.05s }
    output_schema:
      type: object
      properties: { score: { type: number }, reason: { type: string } }
      required: [score]
"#;
    let done = run(&client, yaml, json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["score"], 0.9);
    assert_eq!(done.state["reason"], "clear");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["model"], "judge", "the node's model");
    assert_eq!(
        requests[0]["response_format"]["json_schema"]["schema"]["required"],
        json!(["score"])
    );
    let retries = weft_tests::events_of(&client, &done.run_id, "node_retrying").await?;
    let errors: Vec<&str> = retries
        .iter()
        .map(|e| e.body["error"].as_str().unwrap())
        .collect();
    assert!(errors[0].contains("output_schema"), "{errors:?}");
    assert!(
        errors[1].contains("structured output is not JSON"),
        "{errors:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_429_is_waited_out_as_retry_after_says() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, n| match n {
        0 => Reply::Status(429, Some(1)),
        _ => Reply::Text("fine".into()),
    })
    .await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let started = Instant::now();
    let done = run(&client, SUMMARY, json!({"topic": "x"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["summary"], "fine");
    assert_eq!(llm.requests().len(), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    // Within one attempt: the node was not retried.
    let retries = weft_tests::events_of(&client, &done.run_id, "node_retrying").await?;
    assert!(retries.is_empty());
    Ok(())
}

#[tokio::test]
async fn slow_malformed_and_refused_replies_fail_the_step_clearly() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, _| match last_message(request).as_str() {
        "slow" => Reply::Slow(Duration::from_secs(5), Box::new(Reply::Text("late".into()))),
        "garbage" => Reply::Malformed("<html>not an API</html>".into()),
        _ => Reply::Status(400, None),
    })
    .await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let yaml = |prompt: &str| {
        format!("nodes:\n  ask: {{ kind: llm, start: true, prompt: \"{prompt}\", timeout: 1s }}\n")
    };
    let slow = run(&client, &yaml("slow"), json!({})).await?;
    assert_eq!(slow.status, RunStatus::Failed);
    let error = slow.error.unwrap();
    assert!(
        error.message.contains("did not answer within"),
        "{}",
        error.message
    );
    let garbage = run(&client, &yaml("garbage"), json!({})).await?;
    let error = garbage.error.unwrap();
    assert!(
        error.message.contains("model_error") || error.message.contains("not a chat completion"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("<html>not an API</html>"),
        "{}",
        error.message
    );
    let refused = run(&client, &yaml("other"), json!({})).await?;
    let error = refused.error.unwrap();
    assert!(
        error.message.contains("HTTP 400 Bad Request"),
        "{}",
        error.message
    );
    for id in [&slow.run_id, &garbage.run_id, &refused.run_id] {
        assert!(!shown(&client, id).await?.contains(KEY));
    }
    Ok(())
}

#[tokio::test]
async fn a_loop_until_a_sentence_is_judged_by_the_workers_model() -> anyhow::Result<()> {
    // The model is satisfied on its second judgement; its first reason is
    // the next iteration's feedback.
    let llm = TestLlm::start(KEY, |request, _| {
        let text = last_message(request);
        let json = text.find('{').map_or("", |start| &text[start..]);
        let iteration: Value = serde_json::from_str(json).unwrap_or(Value::Null);
        let n = iteration["iteration"].as_u64().unwrap_or(0);
        Reply::Json(json!({"satisfied": n >= 2, "reason": format!("needs work after {n}")}))
    })
    .await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let yaml = r#"
state:
  drafts: { type: integer, default: 0 }
  heard: { type: string }
nodes:
  refine:
    kind: loop
    start: true
    body: write
    until: "the draft is good enough to publish"
    max_iterations: 5
    output_key: drafts
  write:
    kind: script
    run: [python3, -c, "import json,sys; t=json.load(sys.stdin); l=t['scope']['loop']; print(json.dumps({'drafts': l['iteration'], 'heard': l['feedback']}))"]
"#;
    let done = run(&client, yaml, json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["drafts"], 2);
    assert_eq!(done.state["heard"], "needs work after 1");
    let judged = llm.requests();
    assert_eq!(judged.len(), 2);
    assert!(last_message(&judged[0]).starts_with("Condition: the draft is good enough to publish"));
    assert_eq!(
        judged[0]["response_format"]["json_schema"]["name"],
        "judgement"
    );
    let iterations = weft_tests::events_of(&client, &done.run_id, "loop_iteration").await?;
    let reasons: Vec<&str> = iterations
        .iter()
        .map(|e| e.body["reason"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(reasons, ["needs work after 1", "needs work after 2"]);
    Ok(())
}

/// A model for the examples: structured findings, a tool-calling agent, a
/// writer, and a judge satisfied on the second iteration.
fn example_model(request: &Value) -> Reply {
    let text = last_message(request);
    let tool_messages = request["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    if request.get("tools").is_some() {
        return match tool_messages {
            0 => Reply::ToolCalls(vec![(
                "search_notes".into(),
                json!({"word": "checkpoints"}),
            )]),
            1 => Reply::ToolCalls(vec![(
                "count_words".into(),
                json!({"text": "Weft checkpoints every wave."}),
            )]),
            _ => Reply::Text(format!("Weft checkpoints every wave ({text} words).")),
        };
    }
    match request["response_format"]["json_schema"]["name"].as_str() {
        Some("judgement") => {
            let done = text.contains("\"iteration\": 2");
            Reply::Json(json!({"satisfied": done, "reason": "add an example"}))
        }
        Some(_) => {
            let subject = text.split_whitespace().nth(5).unwrap_or("?").to_owned();
            let confidence = if subject.starts_with('t') { 0.9 } else { 0.5 };
            Reply::Json(json!({"finding": format!("about {subject}"), "confidence": confidence}))
        }
        None => Reply::Text(format!("draft of {} characters", text.len())),
    }
}

#[tokio::test]
async fn the_model_examples_run_against_the_test_server() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, _| example_model(request)).await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let example = |name: &str| weft_tests::repo().join("examples").join(name);

    let subjects = json!({"subjects": ["serde", "tokio"]});
    let run = client
        .submit_file(&example("research-llm.yaml"), &subjects)
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["findings"][0]["finding"], "about serde");
    assert_eq!(done.state["findings"][0]["subject"], "serde");
    assert_eq!(done.state["ranking"], json!(["tokio", "serde"]));

    let question = json!({"question": "What survives a crash?"});
    let run = client
        .submit_file(&example("agent-tools.yaml"), &question)
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["answer"],
        "Weft checkpoints every wave (4 words)."
    );
    let tools = weft_tests::events_of(&client, &run.run_id, "tool_called").await?;
    assert_eq!(tools.len(), 2);
    assert!(tools.iter().all(|t| t.body["error"].is_null()), "{tools:?}");

    let topic = json!({"topic": "durable workflows"});
    let run = client
        .submit_file(&example("writer-judge.yaml"), &topic)
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let iterations = weft_tests::events_of(&client, &run.run_id, "loop_iteration").await?;
    assert_eq!(iterations.len(), 2);
    let second_prompt = llm
        .requests()
        .iter()
        .filter(|r| r.get("response_format").is_none() && r.get("tools").is_none())
        .nth(1)
        .map(last_message)
        .unwrap_or_default();
    assert!(
        second_prompt.contains("A reviewer said: add an example"),
        "{second_prompt}"
    );
    Ok(())
}

/// The test endpoint's `/v1/embeddings` (for retrieval's tests): one
/// vector per input, in order, of unit length and the same for the same
/// text; a query is nearer to the passage that shares its words than to
/// one that does not; a bad request or key is refused.
#[tokio::test]
async fn the_test_endpoint_embeds_texts_so_that_shared_words_are_near() -> anyhow::Result<()> {
    use weft_tests::llm_server::{EMBEDDING_DIMENSIONS, embedding_of};
    let llm = TestLlm::start(KEY, |_, _| Reply::Text(String::new())).await?;
    let http = reqwest::Client::new();
    let post = |body: Value, key: &str| {
        http.post(format!("{}/embeddings", llm.url))
            .bearer_auth(key)
            .json(&body)
            .send()
    };
    let texts = [
        "Raft elects a leader by majority vote",
        "Bread rises when yeast ferments",
        "How does raft elect its leader?",
    ];
    let reply: Value = post(json!({"model": "embed", "input": texts}), KEY)
        .await?
        .error_for_status()?
        .json()
        .await?;
    let vectors: Vec<Vec<f32>> = reply["data"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, item)| {
            assert_eq!(item["index"], i);
            serde_json::from_value(item["embedding"].clone()).unwrap()
        })
        .collect();
    assert_eq!(vectors.len(), 3);
    for (vector, text) in vectors.iter().zip(texts) {
        assert_eq!(vector.len(), EMBEDDING_DIMENSIONS);
        assert_eq!(*vector, embedding_of(text));
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let (query, raft, bread) = (&vectors[2], &vectors[0], &vectors[1]);
    assert!(
        dot(query, raft) > dot(query, bread) + 0.2,
        "{} vs {}",
        dot(query, raft),
        dot(query, bread)
    );
    assert_eq!(llm.embedding_requests().len(), 1);
    assert!(llm.requests().is_empty(), "chat requests are kept apart");
    // One string is one vector; a missing input or a wrong key is refused.
    let one: Value = post(json!({"model": "embed", "input": "raft"}), KEY)
        .await?
        .json()
        .await?;
    assert_eq!(one["data"].as_array().map(Vec::len), Some(1));
    let status = post(json!({"model": "embed"}), KEY).await?.status();
    assert_eq!(status, 400);
    let status = post(json!({"model": "embed", "input": "x"}), "sk-wrong")
        .await?
        .status();
    assert_eq!(status, 401);
    Ok(())
}

/// The worker's embeddings client (for knowledge bases and `rag` queries)
/// against the test endpoint over real HTTP: texts go in batches of 64,
/// each vector is matched to its text by `index`, a 429 is waited out, and
/// a reply of the wrong shape fails naming what is wrong.
#[tokio::test]
async fn the_worker_embeds_texts_in_batches_and_refuses_a_wrong_reply() -> anyhow::Result<()> {
    use std::collections::BTreeMap;
    use weft_tests::llm_server::{EMBEDDING_DIMENSIONS, EmbeddingReply, embedding_of};
    use weft_worker::llm::embeddings::{BATCH, embed};
    use weft_worker::llm::{ProviderConfig, Providers};
    // Request 0: a 429 to wait out; 1: the vectors listed last first; 5
    // (a second call's second batch): vectors of 3 dimensions; 6: not JSON.
    let llm = TestLlm::start_with_embeddings(
        KEY,
        |_, _| Reply::Text(String::new()),
        |_, n| match n {
            0 => EmbeddingReply::Status(429, Some(0)),
            1 => EmbeddingReply::Reversed,
            5 => EmbeddingReply::Dimensions(3),
            6 => EmbeddingReply::Malformed(format!("garbage {KEY}")),
            _ => EmbeddingReply::Vectors,
        },
    )
    .await?;
    let config = ProviderConfig {
        base_url: llm.url.clone(),
        api_key: Some(KEY.into()),
        ..ProviderConfig::default()
    };
    let providers = Providers::new(
        BTreeMap::from([("default".to_owned(), config)]),
        |_| None,
        &weft_worker::Secrets::default(),
    )?;
    let provider = providers.get(None)?;
    let deadline = || Instant::now() + Duration::from_secs(30);
    let texts: Vec<String> = (0..150)
        .map(|i| format!("passage {i} about topic {}", i % 7))
        .collect();
    let embedded = embed(provider, "embed-small", &texts, deadline())
        .await
        .map_err(|failure| anyhow::anyhow!(failure.message))?;
    assert_eq!(embedded.vectors.len(), 150);
    for (vector, text) in embedded.vectors.iter().zip(&texts) {
        assert_eq!(vector.len(), EMBEDDING_DIMENSIONS);
        assert_eq!(*vector, embedding_of(text), "{text}: matched by index");
    }
    // Three batches (64, 64, 22), the first tried twice.
    let requests = llm.embedding_requests();
    let sizes: Vec<usize> = requests
        .iter()
        .map(|r| r["input"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes, vec![BATCH, BATCH, BATCH, 150 - 2 * BATCH]);
    assert_eq!(embedded.requests, 4);
    assert_eq!(embedded.tokens, 150 * 5, "the provider's counts, summed");
    assert_eq!(embedded.model, "embed-small");
    // Requests 4 and 5: a second batch of another length than the first.
    let error = embed(provider, "embed-small", &texts[..70], deadline())
        .await
        .unwrap_err();
    assert!(
        error
            .message
            .contains("(data[0].embedding has 3 dimensions, not 64)"),
        "{}",
        error.message
    );
    // Request 6: not JSON, quoted with the key masked.
    let error = embed(provider, "embed-small", &texts[..2], deadline())
        .await
        .unwrap_err();
    assert!(
        error.message.starts_with(
            "provider 'default' sent a reply that is not embeddings (not JSON): garbage"
        ),
        "{}",
        error.message
    );
    assert!(!error.message.contains(KEY), "{}", error.message);
    Ok(())
}
