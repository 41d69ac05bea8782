//! `[[limits]]`: cluster-wide rate limits on model calls (SPEC 18), read
//! and checked here, enforced by the dispatcher (`dispatch::limits`).
//!
//! ```toml
//! [[limits]]
//! name = "openai-gpt"
//! match = { provider = "default", model = "gpt-*" }   # provider, model, kind, handler, namespace
//! requests_per_minute = 500
//! tokens_per_minute = 200000
//! concurrency = 64
//! ```
//!
//! A value out of range is refused naming the entry; an entry that can
//! match nothing is accepted with a warning (`--check-config` prints it,
//! the coordinator logs it at start).

use std::collections::BTreeSet;

use serde::Deserialize;

use super::ConfigError;
use crate::dispatch::WorkerKind;
use crate::dispatch::limits::{LimitSpec, MODEL_KINDS, Matcher};

/// One `[[limits]]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitEntry {
    name: Option<String>,
    #[serde(rename = "match", default)]
    matcher: MatchEntry,
    requests_per_minute: Option<u64>,
    tokens_per_minute: Option<u64>,
    concurrency: Option<u64>,
}

/// Its `match` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchEntry {
    provider: Option<String>,
    model: Option<String>,
    kind: Option<String>,
    handler: Option<String>,
    namespace: Option<String>,
}

/// The entries as the dispatcher takes them, or the first one that is
/// wrong, named `limits[i]` (its `name` too, when it has one).
pub(super) fn limits(entries: Vec<LimitEntry>) -> Result<Vec<LimitSpec>, ConfigError> {
    let mut names = BTreeSet::new();
    let mut specs = Vec::with_capacity(entries.len());
    for (index, entry) in entries.into_iter().enumerate() {
        let key = match &entry.name {
            Some(name) => format!("limits[{index}] ('{name}')"),
            None => format!("limits[{index}]"),
        };
        let invalid = |what: &str, reason: String| ConfigError::Invalid {
            key: format!("{key}{what}"),
            reason,
        };
        let name = entry.name.clone().unwrap_or_default();
        if name.trim().is_empty() {
            return Err(invalid(
                ".name",
                "every limit needs a name (events, metrics and errors name it)".into(),
            ));
        }
        if !names.insert(name.clone()) {
            return Err(invalid(
                ".name",
                format!("another limit is named '{name}' too; names must be unique"),
            ));
        }
        for (field, value) in [
            ("requests_per_minute", entry.requests_per_minute),
            ("tokens_per_minute", entry.tokens_per_minute),
            ("concurrency", entry.concurrency),
        ] {
            if value == Some(0) {
                return Err(invalid(
                    &format!(".{field}"),
                    "must be at least 1 (leave it out for no limit)".into(),
                ));
            }
        }
        if entry.requests_per_minute.is_none()
            && entry.tokens_per_minute.is_none()
            && entry.concurrency.is_none()
        {
            return Err(invalid(
                "",
                "limits nothing: give requests_per_minute, tokens_per_minute or concurrency".into(),
            ));
        }
        let MatchEntry {
            provider,
            model,
            kind,
            handler,
            namespace,
        } = entry.matcher;
        if let Some(kind) = &kind
            && kind.parse::<WorkerKind>().is_err()
        {
            return Err(invalid(
                ".match.kind",
                format!(
                    "unknown kind '{kind}' (kinds that run on workers: {})",
                    WorkerKind::ALL.map(WorkerKind::as_str).join(", ")
                ),
            ));
        }
        let model = model
            .map(|glob| {
                globset::Glob::new(&glob)
                    .map(|g| g.compile_matcher())
                    .map_err(|error| {
                        invalid(".match.model", format!("'{glob}' is not a glob: {error}"))
                    })
            })
            .transpose()?;
        let matcher = Matcher {
            provider,
            model,
            kind,
            handler,
            namespace,
        };
        if matcher.counts_tasks() && entry.tokens_per_minute.is_some() {
            return Err(invalid(
                ".tokens_per_minute",
                "this entry counts tasks (its kind or handler makes no model call), which use no \
                 tokens; give requests_per_minute or concurrency"
                    .into(),
            ));
        }
        specs.push(LimitSpec {
            name: name.into(),
            matcher,
            requests_per_minute: entry.requests_per_minute,
            tokens_per_minute: entry.tokens_per_minute,
            concurrency: entry.concurrency,
        });
    }
    Ok(specs)
}

/// One `[[namespaces]]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceEntry {
    name: Option<String>,
    weight: Option<u64>,
    max_running_runs: Option<u64>,
    tokens_per_day: Option<u64>,
    cost_per_day: Option<f64>,
}

/// A namespace's share and caps (SPEC 18).
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceSpec {
    /// The namespace.
    pub name: String,
    /// Its weight in the fair share of slots and limits (default 1): a
    /// namespace of weight 2 gets two turns for another's one while both
    /// have tasks waiting.
    pub weight: u32,
    /// How many of its runs may be running (or waiting) at once; a
    /// submission beyond it is refused.
    pub max_running_runs: Option<u32>,
    /// What its model calls may spend in a day (UTC); new runs are refused
    /// once it is spent.
    pub day: crate::day_spend::DayBudget,
}

/// The entries, or the first that is wrong, named `namespaces[i]`.
pub(super) fn namespaces(entries: Vec<NamespaceEntry>) -> Result<Vec<NamespaceSpec>, ConfigError> {
    let mut names = BTreeSet::new();
    let mut specs = Vec::with_capacity(entries.len());
    for (index, entry) in entries.into_iter().enumerate() {
        let key = match &entry.name {
            Some(name) => format!("namespaces[{index}] ('{name}')"),
            None => format!("namespaces[{index}]"),
        };
        let invalid = |what: &str, reason: String| ConfigError::Invalid {
            key: format!("{key}{what}"),
            reason,
        };
        let name = entry.name.clone().unwrap_or_default();
        if name.trim().is_empty() {
            return Err(invalid(".name", "every entry names its namespace".into()));
        }
        if !names.insert(name.clone()) {
            return Err(invalid(
                ".name",
                format!("'{name}' has another entry; give each namespace one"),
            ));
        }
        let whole = |field: &str, value: Option<u64>| match value {
            Some(0) => Err(invalid(
                &format!(".{field}"),
                "must be at least 1 (leave it out for the default)".into(),
            )),
            Some(n) if n > u64::from(u32::MAX) => Err(invalid(
                &format!(".{field}"),
                format!("must be at most {}", u32::MAX),
            )),
            other => Ok(other.map(|n| n as u32)),
        };
        if entry.tokens_per_day == Some(0) {
            return Err(invalid(
                ".tokens_per_day",
                "must be at least 1 (leave it out for no day budget)".into(),
            ));
        }
        if let Some(cost) = entry.cost_per_day
            && !(cost.is_finite() && cost > 0.0)
        {
            return Err(invalid(
                ".cost_per_day",
                format!("must be a number above 0 (leave it out for no day budget), got {cost}"),
            ));
        }
        specs.push(NamespaceSpec {
            weight: whole("weight", entry.weight)?.unwrap_or(1),
            max_running_runs: whole("max_running_runs", entry.max_running_runs)?,
            day: crate::day_spend::DayBudget {
                tokens: entry.tokens_per_day,
                cost: entry.cost_per_day,
            },
            name,
        });
    }
    Ok(specs)
}

/// Why an entry can match nothing, if it can't; `namespaces` are the ones
/// identities name (empty: any may run).
pub(super) fn matches_nothing(spec: &LimitSpec, namespaces: &BTreeSet<String>) -> Option<String> {
    let m = &spec.matcher;
    let counts_models = m.provider.is_some() || m.model.is_some();
    if m.handler.is_some() && m.kind.as_deref().is_some_and(|k| k != "task") {
        return Some(format!(
            "matches nothing: a handler runs in `kind: task` steps, not '{}' ones",
            m.kind.as_deref().unwrap_or_default()
        ));
    }
    if counts_models && m.counts_tasks() {
        return Some(format!(
            "matches nothing: its provider or model counts model calls, but {} makes none \
             (model calls come from {} steps)",
            match (&m.handler, &m.kind) {
                (Some(handler), _) => format!("handler '{handler}'"),
                (None, kind) => format!("kind '{}'", kind.as_deref().unwrap_or_default()),
            },
            MODEL_KINDS.join(", ")
        ));
    }
    if let Some(namespace) = &m.namespace
        && !namespaces.is_empty()
        && !namespaces.contains(namespace)
    {
        return Some(format!(
            "matches nothing: no identity may submit to namespace '{namespace}' (identities' \
             namespaces: {})",
            namespaces.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<LimitSpec>, ConfigError> {
        #[derive(Deserialize)]
        struct File {
            limits: Vec<LimitEntry>,
        }
        let file: File = toml::from_str(text).expect("toml");
        limits(file.limits)
    }

    #[test]
    fn an_entry_is_read_with_its_match() {
        let specs = read(
            r#"
            [[limits]]
            name = "openai-gpt"
            match = { provider = "default", model = "gpt-*" }
            requests_per_minute = 500
            tokens_per_minute = 200000
            concurrency = 64
            "#,
        )
        .expect("valid");
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].name.as_ref(), "openai-gpt");
        assert_eq!(specs[0].requests_per_minute, Some(500));
        let glob = specs[0].matcher.model.as_ref().expect("a model glob");
        assert!(glob.is_match("gpt-4o") && !glob.is_match("llama3"));
    }

    #[test]
    fn wrong_entries_are_refused_naming_them() {
        let cases = [
            ("requests_per_minute = 5", "limits[0].name"),
            ("name = \"a\"", "limits nothing"),
            (
                "name = \"a\"\nconcurrency = 0",
                "limits[0] ('a').concurrency",
            ),
            (
                "name = \"a\"\nconcurrency = 1\nmatch = { kind = \"llms\" }",
                "unknown kind 'llms'",
            ),
            (
                "name = \"a\"\nconcurrency = 1\nmatch = { model = \"gpt-[\" }",
                "is not a glob",
            ),
            (
                "name = \"a\"\ntokens_per_minute = 1\nmatch = { handler = \"scrape\" }",
                "counts tasks",
            ),
            (
                "name = \"a\"\nconcurrency = 1\nmatch = { modle = \"x\" }",
                "",
            ),
        ];
        for (body, wanted) in cases {
            let text = format!("[[limits]]\n{body}\n");
            #[derive(Deserialize)]
            #[allow(dead_code)]
            struct File {
                limits: Vec<LimitEntry>,
            }
            let parsed: Result<File, _> = toml::from_str(&text);
            let Ok(file) = parsed else {
                // An unknown key is refused by the parser.
                assert!(wanted.is_empty(), "{body}: refused by the parser");
                continue;
            };
            let error = limits(file.limits).expect_err(body).to_string();
            assert!(error.contains(wanted), "{body}: {error}");
        }
        let twice = read(
            "[[limits]]\nname = \"a\"\nconcurrency = 1\n[[limits]]\nname = \"a\"\nconcurrency = 2\n",
        )
        .expect_err("two of one name")
        .to_string();
        assert!(twice.contains("another limit is named 'a'"), "{twice}");
    }

    #[test]
    fn entries_that_match_nothing_are_named() {
        let specs = read(
            r#"
            [[limits]]
            name = "scripts-gpt"
            match = { kind = "script", model = "gpt-*" }
            concurrency = 1
            [[limits]]
            name = "ghost"
            match = { namespace = "ghost" }
            concurrency = 1
            [[limits]]
            name = "fine"
            match = { namespace = "team-a", kind = "llm" }
            concurrency = 1
            "#,
        )
        .expect("valid");
        let namespaces: BTreeSet<String> = ["team-a".to_owned()].into();
        let why = |i: usize| matches_nothing(&specs[i], &namespaces);
        assert!(
            why(0)
                .expect("scripts call no model")
                .contains("kind 'script'")
        );
        assert!(why(1).expect("nobody submits there").contains("'ghost'"));
        assert_eq!(why(2), None);
    }
}
