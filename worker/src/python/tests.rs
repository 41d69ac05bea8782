//! The Python host against a real `python3`.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::*;

const SECOND: Duration = Duration::from_secs(10);

/// A fresh directory holding `files`.
fn bundle(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-python-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn kwargs(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

const HELPERS: &str = r#"
import time

def inc(counter, **kw):
    print("this goes to stderr, not into the protocol")
    return {"counter": counter + 1}

def fails(x):
    raise ValueError("no good: %s" % x)

def spins():
    while True:
        time.sleep(0.01)

def _private():
    pass
"#;

#[tokio::test]
async fn a_sidecar_function_is_called_and_its_prints_stay_out_of_the_answer() {
    let dir = bundle("call", &[("helpers.py", HELPERS)]);
    let pool = PythonPool::new("python3", &dir, 1);
    for n in 0..3 {
        let answer = pool
            .call(
                "helpers.py",
                "inc",
                vec![],
                kwargs(json!({"counter": n, "x": 1})),
                SECOND,
            )
            .await
            .unwrap();
        assert_eq!(answer, json!({"counter": n + 1}));
    }
    let signatures = pool.signatures("helpers.py", SECOND).await.unwrap();
    assert_eq!(
        signatures["inc"],
        json!({"params": ["counter"], "var_keyword": true})
    );
    assert_eq!(signatures["fails"]["params"], json!(["x"]));
    assert!(signatures.get("_private").is_none());
    assert!(
        signatures.get("time").is_none(),
        "imports are not the module's functions"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn an_exception_comes_back_as_its_traceback_and_the_host_goes_on() {
    let dir = bundle("raise", &[("helpers.py", HELPERS)]);
    let pool = PythonPool::new("python3", &dir, 1);
    let error = pool
        .call("helpers.py", "fails", vec![json!(7)], Map::new(), SECOND)
        .await
        .unwrap_err();
    let PythonError::Raised(text) = &error else {
        panic!("{error:?}")
    };
    assert!(text.contains("ValueError: no good: 7"), "{text}");
    assert!(
        text.contains("helpers.py"),
        "the traceback names the file: {text}"
    );
    let missing = pool
        .call("helpers.py", "nope", vec![], Map::new(), SECOND)
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("has no function 'nope'"),
        "{missing}"
    );
    let fine = pool
        .call(
            "helpers.py",
            "inc",
            vec![],
            kwargs(json!({"counter": 1})),
            SECOND,
        )
        .await
        .unwrap();
    assert_eq!(fine, json!({"counter": 2}));
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn a_call_past_its_timeout_kills_its_process_and_the_next_call_works() {
    let dir = bundle("timeout", &[("helpers.py", HELPERS)]);
    let pool = PythonPool::new("python3", &dir, 1);
    let error = pool
        .call(
            "helpers.py",
            "spins",
            vec![],
            Map::new(),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, PythonError::Timeout(_)), "{error:?}");
    let fine = pool
        .call(
            "helpers.py",
            "inc",
            vec![],
            kwargs(json!({"counter": 41})),
            SECOND,
        )
        .await
        .unwrap();
    assert_eq!(fine, json!({"counter": 42}));
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn two_bundles_helpers_do_not_collide_and_import_paths_resolve() {
    let a = bundle("a", &[("helpers.py", "def who():\n    return 'a'\n")]);
    let b = bundle(
        "b",
        &[
            ("helpers.py", "def who():\n    return 'b'\n"),
            (
                "tools/text.py",
                "def shout(word):\n    return word.upper()\n",
            ),
            ("tools/__init__.py", ""),
        ],
    );
    let (pool_a, pool_b) = (
        PythonPool::new("python3", &a, 1),
        PythonPool::new("python3", &b, 1),
    );
    let who_a = pool_a
        .call("helpers.py", "who", vec![], Map::new(), SECOND)
        .await
        .unwrap();
    let who_b = pool_b
        .call("helpers.py", "who", vec![], Map::new(), SECOND)
        .await
        .unwrap();
    assert_eq!((who_a, who_b), (json!("a"), json!("b")));
    let shouted = pool_b
        .call(
            "tools.text",
            "shout",
            vec![json!("weft")],
            Map::new(),
            SECOND,
        )
        .await
        .unwrap();
    assert_eq!(shouted, json!("WEFT"));
    std::fs::remove_dir_all(a).ok();
    std::fs::remove_dir_all(b).ok();
}

#[tokio::test]
async fn forms_filter_keywords_build_loop_iterations_and_await_coroutines() {
    let helpers = r#"
async def later(x):
    return x * 2

def only_topic(topic):
    return topic

def judge(it):
    assert it.result == it.output and it.history[0].reason == "first"
    return (it.iteration > 1, "at %d of %d" % (it.iteration, it.max_iterations))
"#;
    let dir = bundle("forms", &[("helpers.py", helpers)]);
    let pool = PythonPool::new("python3", &dir, 1);
    let call = |function: &'static str, args: Vec<Value>, form: &'static str| Call {
        module: "helpers.py",
        function,
        args,
        kwargs: Map::new(),
        form,
        mask: Vec::new(),
        state: None,
    };
    let later = pool
        .call_with(call("later", vec![json!(21)], "positional"), SECOND)
        .await;
    assert_eq!(later, Ok(json!(42)));
    // Keyword arguments the function does not name are left out.
    let topic = pool
        .call_with(
            call(
                "only_topic",
                vec![json!({"topic": "t", "other": 1})],
                "keywords",
            ),
            SECOND,
        )
        .await;
    assert_eq!(topic, Ok(json!("t")));
    let iteration = json!({"iteration": 2, "max_iterations": 5, "is_last": false,
        "output": "o", "state": {}, "history": [{"output": "p", "reason": "first"}]});
    let verdict = pool
        .call_with(call("judge", vec![iteration], "loop_iteration"), SECOND)
        .await;
    assert_eq!(verdict, Ok(json!([true, "at 2 of 5"])));
    std::fs::remove_dir_all(dir).ok();
}
