//! The kinds whose fields need the most checking: `script` (argv or script
//! plus args) and `map` (list source, item name, branch, concurrency).

use serde_json::Value;

use super::builder::Builder;
use super::expr::CelExpr;
use super::raw_node::RawNode;
use super::*;

impl Builder<'_> {
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
        Some(NodeKind::Script { argv, env })
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
        let max_concurrency = match &raw.max_concurrency {
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
        };
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
}
