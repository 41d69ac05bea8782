//! The kinds whose fields need more than a copy: `script` (argv or script
//! plus args), `llm`, `agent` and `rag` (templates; a `rag` node's
//! knowledge, ranking and graph search), `map` (list source, item name,
//! branch, concurrency), `loop` (body and predicate) and `end` (status).

use serde_json::Value;

use super::builder::Builder;
use super::cel::CelExpr;
use super::python_names::Resolved;
use super::raw_node::RawNode;
use super::*;

impl Builder<'_, '_> {
    pub(super) fn script(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let argv = match (&raw.run, &raw.script) {
            (Some(_), Some(_)) => {
                self.error(
                    format!("node '{id}': give either `run` or `script`, not both"),
                    &[id],
                );
                return None;
            }
            (Some(run), None) if !run.is_empty() => {
                if raw.args.is_some() {
                    self.error(
                        format!("node '{id}': `args` goes with `script`; put arguments in `run`"),
                        &[id],
                    );
                }
                run.clone()
            }
            (None, Some(script)) => {
                let mut argv = vec![script.clone()];
                argv.extend(raw.args.clone().unwrap_or_default());
                argv
            }
            _ => {
                self.error(
                    format!("node '{id}': kind 'script' requires `run: [argv…]` or `script: path`"),
                    &[id],
                );
                return None;
            }
        };
        let env = raw
            .env
            .iter()
            .flatten()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect();
        let sandbox = raw.sandbox.as_ref().and_then(|raw| self.sandbox(id, raw));
        Some(NodeKind::Script { argv, env, sandbox })
    }

    /// A script's or function's `sandbox:`, each value checked: a size, a
    /// duration of at least a second, counts of at least one.
    fn sandbox(&mut self, id: &str, raw: &crate::raw_node::RawSandbox) -> Option<crate::Sandbox> {
        let mut sandbox = crate::Sandbox {
            processes: raw.processes,
            open_files: raw.open_files,
            network: raw.network,
            ..crate::Sandbox::default()
        };
        let mut ok = true;
        if let Some(memory) = &raw.memory {
            match memory.to_bytes() {
                Ok(bytes) if bytes >= 1 << 20 => sandbox.memory = Some(bytes),
                Ok(bytes) => {
                    self.error(format!("node '{id}': sandbox.memory is {bytes} bytes; give a script at least 1MiB"), &[id]);
                    ok = false;
                }
                Err(error) => {
                    self.error(format!("node '{id}': sandbox.memory: {error}"), &[id]);
                    ok = false;
                }
            }
        }
        if let Some(cpu) = &raw.cpu {
            match cpu.to_duration() {
                Ok(duration) if duration.as_secs() >= 1 => sandbox.cpu = Some(duration.as_secs()),
                Ok(_) => {
                    self.error(format!("node '{id}': sandbox.cpu is under a second; CPU time is limited in whole seconds"), &[id]);
                    ok = false;
                }
                Err(error) => {
                    self.error(format!("node '{id}': sandbox.cpu: {error}"), &[id]);
                    ok = false;
                }
            }
        }
        for (name, value) in [("processes", raw.processes), ("open_files", raw.open_files)] {
            if value == Some(0) {
                self.error(
                    format!("node '{id}': sandbox.{name} is 0; a script needs at least 1"),
                    &[id],
                );
                ok = false;
            }
        }
        ok.then_some(sandbox)
    }

    pub(super) fn map(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let mut missing = Vec::new();
        for (field, value) in [
            ("over", &raw.over),
            ("as", &raw.item_name),
            ("branch", &raw.branch),
            ("collect_into", &raw.collect_into),
        ] {
            if value.as_deref().is_none_or(|v| v.trim().is_empty()) {
                missing.push(field);
            }
        }
        if !missing.is_empty() {
            self.error(
                format!(
                    "map node '{id}': missing required field{} {}",
                    if missing.len() > 1 { "s" } else { "" },
                    missing.join(", ")
                ),
                &[id],
            );
            return None;
        }
        let over_text = raw.over.clone()?;
        let over = if over_text.contains("{{") {
            ListSource::Template(self.template(id, "over", &over_text)?)
        } else {
            match CelExpr::compile(&over_text) {
                Ok(expr) => ListSource::Cel(expr),
                Err(error) => {
                    self.error(format!("map node '{id}': over: {error}"), &[id]);
                    return None;
                }
            }
        };
        let max_concurrency = self.max_concurrency(id, raw)?;
        let branch_id = raw.branch.clone()?;
        let branch = match self.resolve_target(id, "branch", &branch_id) {
            Some(Target::Node(idx)) => Some(idx),
            Some(Target::End) => {
                self.error(format!("map node '{id}': branch cannot be END"), &[id]);
                None
            }
            None => None,
        };
        Some(NodeKind::Map(Box::new(MapConfig {
            over,
            item_name: raw.item_name.clone()?,
            branch,
            output_key: raw.output_key.clone().unwrap_or_else(|| "output".into()),
            collect_into: raw.collect_into.clone()?,
            max_concurrency,
        })))
    }

    pub(super) fn llm(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let prompt = self.required(id, "llm", "prompt", &raw.prompt)?;
        Some(NodeKind::Llm(Box::new(LlmConfig {
            model: raw.model.clone(),
            system: self.optional_template(id, "system", &raw.system),
            prompt: self.template(id, "prompt", &prompt)?,
            temperature: raw.temperature,
            max_tokens: raw.max_tokens,
            provider: raw.provider.clone(),
        })))
    }

    /// A `rag` node: its fields read one by one, each problem named. Rules
    /// that need the graph's knowledge bases are validation's.
    pub(super) fn rag(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let knowledge = match &raw.knowledge {
            Some(Value::String(name)) => vec![name.clone()],
            Some(Value::Array(names)) if !names.is_empty() => {
                let names: Option<Vec<String>> = names
                    .iter()
                    .map(|name| name.as_str().map(str::to_owned))
                    .collect();
                let Some(names) = names else {
                    self.error(
                        format!(
                            "node '{id}': knowledge: a list of knowledge base names, each a string"
                        ),
                        &[id],
                    );
                    return None;
                };
                names
            }
            None | Some(Value::Array(_)) => {
                self.error(
                    format!("node '{id}': kind 'rag' requires field 'knowledge' (a knowledge base's name, or a list of them)"),
                    &[id],
                );
                return None;
            }
            Some(other) => {
                self.error(
                    format!(
                        "node '{id}': knowledge: expected a knowledge base's name or a list of them, found {}",
                        json_type_name(other)
                    ),
                    &[id],
                );
                return None;
            }
        };
        let top_k = match raw.top_k {
            None => DEFAULT_TOP_K,
            Some(k) if (1..=i64::from(MAX_TOP_K)).contains(&k) => k as u32,
            Some(k) => {
                self.error(
                    format!("node '{id}': top_k must be between 1 and {MAX_TOP_K}, got {k}"),
                    &[id],
                );
                return None;
            }
        };
        let mode = match raw.mode.as_deref() {
            None => None,
            Some(name) => match RagMode::ALL.iter().find(|(n, _)| *n == name) {
                Some((_, mode)) => Some(*mode),
                None => {
                    let names = RagMode::ALL.map(|(n, _)| n);
                    let hint = did_you_mean(name, &names)
                        .map(|k| format!("did you mean '{k}'? "))
                        .unwrap_or_default();
                    self.error(
                        format!("node '{id}': unknown mode '{name}' ({hint}modes: keyword, vector, hybrid)"),
                        &[id],
                    );
                    return None;
                }
            },
        };
        let hops = match &raw.graph {
            None => None,
            Some(value) => Some(self.rag_hops(id, value)?),
        };
        let rerank = match &raw.rerank {
            None => None,
            Some(value) => Some(self.rerank(id, value)?),
        };
        Some(NodeKind::Rag(Box::new(RagConfig {
            knowledge,
            query: self.optional_template(id, "query", &raw.query),
            top_k,
            mode,
            hops,
            rerank,
            prompt: self.optional_template(id, "prompt", &raw.prompt),
            system: self.optional_template(id, "system", &raw.system),
            model: raw.model.clone(),
            provider: raw.provider.clone(),
            temperature: raw.temperature,
            max_tokens: raw.max_tokens,
        })))
    }

    /// A `rag` node's `graph: {hops: N}`.
    fn rag_hops(&mut self, id: &str, value: &Value) -> Option<u32> {
        let hops = value
            .as_object()
            .filter(|fields| fields.keys().all(|key| key == "hops"))
            .and_then(|fields| fields.get("hops"))
            .and_then(Value::as_u64);
        match hops {
            Some(hops) if hops <= u64::from(MAX_HOPS) => Some(hops as u32),
            Some(hops) => {
                self.error(
                    format!("node '{id}': graph.hops must be at most {MAX_HOPS}, got {hops}"),
                    &[id],
                );
                None
            }
            None => {
                self.error(
                    format!("node '{id}': graph: expected {{hops: N}} (graph search N links deep; {{hops: 0}} turns it off), found {value}"),
                    &[id],
                );
                None
            }
        }
    }

    /// A `rag` node's `rerank: {model, provider}`.
    fn rerank(&mut self, id: &str, value: &Value) -> Option<Rerank> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let known = value.as_object().is_some_and(|fields| {
            fields
                .iter()
                .all(|(key, v)| matches!(key.as_str(), "model" | "provider") && v.is_string())
        });
        if !known {
            self.error(
                format!("node '{id}': rerank: expected {{model: NAME, provider: NAME}} (both optional), found {value}"),
                &[id],
            );
            return None;
        }
        Some(Rerank {
            model: text("model"),
            provider: text("provider"),
        })
    }

    /// A subgraph's `graph:`, the child graph's path.
    pub(super) fn subgraph_file(&mut self, id: &str, value: Option<&Value>) -> Option<String> {
        match value {
            Some(Value::String(path)) if !path.trim().is_empty() => Some(path.clone()),
            Some(Value::String(_)) | None => {
                self.error(
                    format!("node '{id}': kind 'subgraph' requires field 'graph'"),
                    &[id],
                );
                None
            }
            Some(other) => {
                self.error(
                    format!(
                        "node '{id}': graph: expected the path of the child graph's file, found {}",
                        json_type_name(other)
                    ),
                    &[id],
                );
                None
            }
        }
    }

    pub(super) fn agent(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let prompt = self.required(id, "agent", "prompt", &raw.prompt)?;
        Some(NodeKind::Agent(Box::new(AgentConfig {
            instructions: self.optional_template(id, "instructions", &raw.instructions),
            prompt: self.template(id, "prompt", &prompt)?,
            tools: raw.tools.clone().unwrap_or_default(),
            max_turns: raw.max_turns,
            provider: raw.provider.clone(),
            model: raw.model.clone(),
        })))
    }

    pub(super) fn loop_kind(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let body = self.required(id, "loop", "body", &raw.body)?;
        let until = self.required(id, "loop", "until", &raw.until)?;
        let body = self.resolve_target(id, "body", &body)?.node();
        let until = self.until(id, until);
        Some(NodeKind::Loop(Box::new(LoopConfig {
            body,
            until,
            max_iterations: raw.max_iterations.unwrap_or(10),
            output_key: raw.output_key.clone().unwrap_or_else(|| "output".into()),
        })))
    }

    /// `until` is looked up, not guessed (SPEC 4.2, 4.3): a `conditions:`
    /// entry, code, or else a sentence; with a sidecar declared, a bare
    /// name it lacks is an error, so a typo never becomes a prompt.
    /// A wrong `until` is reported and the loop kept (as judged by a
    /// sentence), so its body is not also called unreachable.
    fn until(&mut self, id: &str, until: String) -> Until {
        if let Some((name, expr)) = self.conditions.iter().find(|(n, _)| *n == until) {
            return Until::Condition(name.clone(), expr.clone());
        }
        match self.python.resolve(&until) {
            Ok(Resolved::Code(code)) => Until::Hosted(code),
            Ok(Resolved::NotCode) => match self.python.sidecar().map(str::to_owned) {
                Some(path) if crate::python::is_identifier(&until) => {
                    let known: Vec<&str> =
                        self.conditions.iter().map(|(n, _)| n.as_str()).collect();
                    let hint = self.python.hint(&until, &known);
                    self.error(
                        format!(
                            "loop node '{id}': until '{until}' is not a function of {path} nor a `conditions:` entry{hint}; with a sidecar declared, a bare name must be defined (write a sentence of several words for a model to judge)"
                        ),
                        &[id],
                    );
                    Until::Sentence(until)
                }
                _ => Until::Sentence(until),
            },
            Err(error) => {
                self.error(format!("loop node '{id}': until {error}"), &[id]);
                Until::Sentence(until)
            }
        }
    }

    /// `function` (or `python`): a Python callable with keyword arguments.
    pub(super) fn function(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let callable = match raw.callable.as_deref().map(str::trim) {
            None => self.python.node_file(id).map_err(|error| error.to_string()),
            Some(text) if text.starts_with("fn:") => Err(format!(
                "function node '{id}': callable '{text}' names a Rust worker's function; a function node calls Python (use kind: task with a handler for Rust)"
            )),
            Some(text) => match self.python.resolve(text) {
                Ok(Resolved::Code(crate::Code::Python(function))) => Ok(function),
                Ok(_) => {
                    let hint = self.python.hint(text, &[]);
                    Err(match self.python.sidecar() {
                        Some(path) => format!(
                            "function node '{id}': callable '{text}' is not a function of {path}{hint} (or write module:function)"
                        ),
                        None => format!(
                            "function node '{id}': callable '{text}' names no function: declare `functions: helpers.py` for bare names, or write module:function"
                        ),
                    })
                }
                Err(error) => Err(format!("function node '{id}': callable {error}")),
            },
        };
        let callable = match callable {
            Ok(callable) => callable,
            Err(message) => {
                self.error(message, &[id]);
                return None;
            }
        };
        let definition = self.python.definition(&callable);
        let sandbox = raw.sandbox.as_ref().and_then(|raw| self.sandbox(id, raw));
        if sandbox.is_some_and(|s| s.cpu.is_some()) {
            self.error(
                format!("node '{id}': sandbox.cpu does not apply to a function node: its Python process serves many calls; bound each call with `timeout`"),
                &[id],
            );
            return None;
        }
        Some(NodeKind::Function(Box::new(FunctionConfig {
            callable,
            definition,
            tool_args: raw.tool_args.clone().unwrap_or_default(),
            output_key: raw.output_key.clone().unwrap_or_else(|| id.to_owned()),
            sandbox,
        })))
    }

    pub(super) fn end(&mut self, id: &str, raw: &RawNode) -> NodeKind {
        let failed = match raw.status.as_deref() {
            None | Some("completed") => false,
            Some("failed") => true,
            Some(other) => {
                self.error(
                    format!("node '{id}': status '{other}' is not one of completed, failed"),
                    &[id],
                );
                false
            }
        };
        NodeKind::End(EndConfig {
            failed,
            message: raw.message.clone(),
        })
    }

    /// `max_concurrency`: an integer ≥ 1 or a template rendered at run time.
    fn max_concurrency(&mut self, id: &str, raw: &RawNode) -> Option<Option<ConcurrencyLimit>> {
        Some(match &raw.max_concurrency {
            None => None,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if v >= 1 && v <= u64::from(u32::MAX) => {
                    Some(ConcurrencyLimit::Fixed(v as u32))
                }
                _ => {
                    self.error(
                        format!(
                            "map node '{id}': max_concurrency must be an integer >= 1, got {n}"
                        ),
                        &[id],
                    );
                    None
                }
            },
            Some(Value::String(text)) if text.contains("{{") => Some(ConcurrencyLimit::Template(
                self.template(id, "max_concurrency", text)?,
            )),
            Some(Value::String(text)) => {
                self.error(
                    format!("map node '{id}': max_concurrency \"{text}\" is a quoted string without a template; write an integer or a \"{{{{key}}}}\" template"),
                    &[id],
                );
                None
            }
            Some(other) => {
                self.error(
                    format!(
                        "map node '{id}': max_concurrency must be an integer or a template, got {}",
                        json_type_name(other)
                    ),
                    &[id],
                );
                None
            }
        })
    }
}
