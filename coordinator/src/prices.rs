//! What model calls cost (SPEC 18): `[prices."MODEL"]` tables of the
//! coordinator's configuration, per million tokens, applied to the usage
//! the providers report.
//!
//! ```toml
//! [prices."gpt-4o"]
//! input = 2.50          # per million prompt tokens
//! output = 10.00        # per million completion tokens
//! cached_input = 1.25   # per million prompt tokens served from cache (default: input)
//! ```
//!
//! A model without a table has no cost: its tokens are counted, and a sum
//! over several models counts only the priced ones.

use std::collections::BTreeMap;

use serde::Deserialize;
use weft_proto::types::Usage;

/// One model's prices, per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt tokens.
    pub input: f64,
    /// Completion tokens.
    pub output: f64,
    /// Prompt tokens served from the provider's cache; `input` when unset.
    #[serde(default)]
    pub cached_input: Option<f64>,
}

/// Every priced model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices(BTreeMap<String, Price>);

impl Prices {
    /// The tables as configured, or the first wrong one (a price that is
    /// negative or not a number).
    pub fn new(tables: BTreeMap<String, Price>) -> Result<Self, String> {
        for (model, price) in &tables {
            for (field, value) in [
                ("input", Some(price.input)),
                ("output", Some(price.output)),
                ("cached_input", price.cached_input),
            ] {
                if value.is_some_and(|v| !v.is_finite() || v < 0.0) {
                    return Err(format!(
                        "prices.\"{model}\".{field}: must be a number of at least 0 (a price per \
                         million tokens)"
                    ));
                }
            }
        }
        Ok(Self(tables))
    }

    /// What `usage` of `model` cost; `None` for a model without a price.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        let price = self.0.get(model)?;
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let fresh = usage.prompt_tokens - cached;
        let per_million = fresh as f64 * price.input
            + cached as f64 * price.cached_input.unwrap_or(price.input)
            + usage.completion_tokens as f64 * price.output;
        Some(per_million / 1_000_000.0)
    }

    /// The sum of usages by model, with the priced models' cost.
    pub fn total<'a>(&self, by_model: impl IntoIterator<Item = (&'a String, &'a Usage)>) -> Usage {
        let mut total = Usage::default();
        for (model, usage) in by_model {
            total.add(&Usage {
                cost: self.cost(model, usage),
                ..usage.clone()
            });
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_cost_counts_cached_prompt_tokens_at_their_price() {
        let prices = Prices::new(BTreeMap::from([(
            "gpt-4o".to_owned(),
            Price {
                input: 2.5,
                output: 10.0,
                cached_input: Some(1.25),
            },
        )]))
        .expect("valid");
        let usage = Usage {
            calls: 1,
            prompt_tokens: 1_000_000,
            completion_tokens: 100_000,
            cached_tokens: 400_000,
            cost: None,
        };
        // 600k fresh at 2.50, 400k cached at 1.25, 100k out at 10.
        let cost = prices.cost("gpt-4o", &usage).expect("priced");
        assert!((cost - (1.5 + 0.5 + 1.0)).abs() < 1e-9, "{cost}");
        assert_eq!(prices.cost("llama3", &usage), None);
        let by_model = BTreeMap::from([
            ("gpt-4o".to_owned(), usage.clone()),
            ("llama3".to_owned(), usage),
        ]);
        let total = prices.total(&by_model);
        assert_eq!((total.calls, total.prompt_tokens), (2, 2_000_000));
        assert!((total.cost.expect("one priced") - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_negative_price_is_refused_naming_it() {
        let error = Prices::new(BTreeMap::from([(
            "m".to_owned(),
            Price {
                input: -1.0,
                output: 1.0,
                cached_input: None,
            },
        )]))
        .expect_err("negative");
        assert!(error.contains("prices.\"m\".input"), "{error}");
    }
}
