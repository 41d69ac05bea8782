//! A submission: the input and the bundle checked, the graph validated
//! and held to the run limits (the admission decision, [`admit`], pure),
//! what it needs looked for among the workers, the run stored, then
//! started ([`Runs::start`]); each refusal says what is wrong and nothing
//! is started.

use std::sync::Arc;
use weft_proto::RunId;

use serde_json::{Map, Value};

use super::{Runs, StoreRefusal, SubmitError, now_ms};
use crate::bundle::{Bundle, Family};
use crate::dispatch::{BlobRef, TaskLauncher};
use crate::durable::journal::Journal;
use crate::durable::stream_copy::CopySetup;
use crate::graph::Graph;
use crate::run_actor::streams::RunStreams;
use crate::run_actor::{
    Owner, RunError, RunInput, RunLimits, RunMachine, RunPlan, RunSetup, Start, spawn_run,
};

/// A top-level input field given by reference to an earlier run's input
/// (`SubmitRequest.input_refs`, [`super::recent_inputs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputReference {
    /// The field of the new run's input (`null` in its text).
    pub field: String,
    /// The run whose input gave the value…
    pub run: String,
    /// …to this field of it.
    pub from_field: String,
}

/// A run accepted: its id, the warnings to show its submitter, and the
/// input fields kept for later submissions to name ([`InputReference`]).
#[derive(Debug)]
pub struct Accepted {
    /// The run's id.
    pub id: RunId,
    /// Warnings for the submitter.
    pub warnings: Vec<String>,
    /// The input fields whose values are kept for a while
    /// ([`super::recent_inputs`]).
    pub referable: Vec<String>,
}

impl Runs {
    /// Starts a run for `owner` (its namespace and submitter); returns its
    /// id and the warnings to show the submitter.
    pub async fn submit(
        &self,
        bundle: Bundle,
        input_json: &str,
        owner: Owner,
    ) -> Result<(RunId, Vec<String>), SubmitError> {
        let accepted = self.submit_with(bundle, input_json, &[], owner).await?;
        Ok((accepted.id, accepted.warnings))
    }

    /// As [`Runs::submit`], with fields of the input given by reference
    /// to earlier runs' inputs.
    pub async fn submit_with(
        &self,
        bundle: Bundle,
        input_json: &str,
        references: &[InputReference],
        owner: Owner,
    ) -> Result<Accepted, SubmitError> {
        // Before the graph is parsed: an input too large is refused as that.
        self.check_input_size(input_json)?;
        let ticket = self.admit_new(&owner.namespace).await?;
        let started = self
            .submit_admitted(bundle, input_json, references, owner)
            .await;
        self.admitted(ticket);
        started
    }

    /// [`Runs::submit_with`] once the run's namespace may have another.
    async fn submit_admitted(
        &self,
        bundle: Bundle,
        input_json: &str,
        references: &[InputReference],
        owner: Owner,
    ) -> Result<Accepted, SubmitError> {
        let referenced = self.referenced(references, &owner.namespace, input_json.len())?;
        let parsed = self.parsed.parse(&bundle)?;
        self.admit(Submission {
            bundle,
            graph: Planned::Kept(parsed.plan),
            family: parsed.family,
            input_json,
            referenced,
            warnings: parsed.warnings,
            owner,
            trace_parent: None,
            parent: None,
        })
        .await
    }

    /// The texts `references` name, each by the field it gives; refused
    /// for the first one this coordinator does not keep for `namespace`,
    /// and when they and the input's `sent` bytes pass `max_input_bytes`.
    fn referenced(
        &self,
        references: &[InputReference],
        namespace: &str,
        sent: usize,
    ) -> Result<Vec<(String, Arc<str>)>, SubmitError> {
        let mut found = Vec::with_capacity(references.len());
        let mut size = sent;
        for reference in references {
            let text = self
                .recent_inputs
                .find(namespace, &reference.run, &reference.from_field)
                .ok_or_else(|| SubmitError::ReferenceNotHeld {
                    field: reference.field.clone(),
                    run: reference.run.clone(),
                    from_field: reference.from_field.clone(),
                })?;
            size += text.len();
            found.push((reference.field.clone(), text));
        }
        if size > self.max_input_bytes {
            return Err(SubmitError::InputTooLarge {
                size,
                limit: self.max_input_bytes,
            });
        }
        Ok(found)
    }

    /// Refuses an input over `max_input_bytes`: a submission's, or a child
    /// run's (its parent's state).
    pub(super) fn check_input_size(&self, input_json: &str) -> Result<(), SubmitError> {
        if input_json.len() > self.max_input_bytes {
            return Err(SubmitError::InputTooLarge {
                size: input_json.len(),
                limit: self.max_input_bytes,
            });
        }
        Ok(())
    }

    /// Starts a run of `submission`'s graph: decided ([`admit`]), checked
    /// against the workers, then started ([`Runs::start`]).
    pub(super) async fn admit(&self, submission: Submission<'_>) -> Result<Accepted, SubmitError> {
        let mut admitted = admit(&self.limits, submission)?;
        let hosting = self.dispatcher.snapshot().await.hosting(
            admitted.plan.graph(),
            admitted.plan.bindings(),
            &admitted.owner.namespace,
        );
        admitted.warnings.extend(
            hosting
                .admit(self.fixed_workers)
                .map_err(SubmitError::Unhostable)?,
        );
        self.start(admitted).await
    }

    /// Starts an admitted run: its files leased, its record stored, its
    /// actor spawned; acknowledged once its first checkpoint is stored.
    async fn start(&self, admitted: Admitted) -> Result<Accepted, SubmitError> {
        self.start_as(admitted, Start::New, self.new_id()).await
    }

    /// Starts an admitted run as `how` says (a new run, or a fork) under
    /// id `id` (a [`Runs::new_id`]).
    pub(super) async fn start_as(
        &self,
        admitted: Admitted,
        how: Start,
        id: RunId,
    ) -> Result<Accepted, SubmitError> {
        let Admitted {
            bundle,
            family,
            plan,
            mut machine,
            mut owner,
            warnings,
            top_level,
        } = admitted;
        // Its held input values, for later submissions that name them.
        let held: Vec<(String, Arc<str>)> = match top_level {
            true => machine
                .held_as_input()
                .filter_map(|name| Some((name.clone(), machine.held_text(name)?.clone())))
                .collect(),
            false => Vec::new(),
        };
        // Its budget covers its children: they inherit the list.
        if plan.graph().settings.budget.is_some() {
            owner.budgets.push(id.clone());
            machine.set_owner(owner.clone());
        }
        let namespace = owner.namespace.clone();
        let lease = self.blobs.add_bundle(&bundle, &owner.namespace);
        let children = self.children_of(&id, &plan, &bundle, family, owner);
        let refs = bundle_refs(&bundle);
        // A top-level run's trace gets its root once the run is accepted; a
        // child's trace is its parent's.
        let root = top_level.then(|| plan.graph().name.clone());
        // Stored before it is acknowledged: a crash from here on loses nothing.
        let journal = self
            .journal_for(&id, &bundle, plan.graph().settings.durability)
            .await?;
        let (admitted, stored) = tokio::sync::oneshot::channel();
        let launcher: Arc<dyn TaskLauncher> = Arc::new(self.dispatcher.clone());
        // Known before its first task can reach a worker: a worker's calls
        // about the run (its knowledge index) and the API must find it.
        spawn_run(
            RunSetup {
                id: id.clone(),
                plan,
                machine,
                bundle: Arc::new(refs),
                launcher,
                shutdown: self.shutdown.child_token(),
                tracker: self.tracker.clone(),
                history: None,
                start: how,
                journal,
                admitted: Some(admitted),
                lease,
                children,
                marks: self.marks.clone(),
                prices: self.prices.clone(),
                spend: self.spend.clone(),
                cache: self.cache.clone(),
                streams: self.streams_for(&id),
                suspect: false,
            },
            |handle| self.register(id.clone(), handle.clone()),
        );
        // The actor's first checkpoint: acknowledged means stored.
        let refused = match stored.await {
            Ok(true) => None,
            Ok(false) => Some(StoreRefusal::Checkpoint),
            Err(_) => Some(StoreRefusal::ShuttingDown),
        };
        if let Some(refusal) = refused {
            self.unregister(&id);
            self.stored_files.release(&id);
            return Err(SubmitError::Store(refusal));
        }
        if let Some(graph) = root {
            weft_process::telemetry::export_run_root(&id, &graph);
        }
        metrics::counter!(crate::metrics::RUNS_SUBMITTED).increment(1);
        let referable = held.iter().map(|(name, _)| name.clone()).collect();
        self.recent_inputs.keep(&namespace, &id, held);
        self.evict(false).await;
        Ok(Accepted {
            id,
            warnings,
            referable,
        })
    }

    /// Stores a new run's bundle files and starts its journal (`None`
    /// without a store).
    /// A new run's stream: kept in the store too when the coordinator
    /// has one.
    fn streams_for(&self, id: &RunId) -> Arc<RunStreams> {
        match &self.store {
            Some(keeper) => RunStreams::stored(CopySetup::new(
                keeper.clone(),
                id.clone(),
                self.tracker.clone(),
            )),
            None => Arc::default(),
        }
    }

    async fn journal_for(
        &self,
        id: &RunId,
        bundle: &Bundle,
        durability: crate::graph::Durability,
    ) -> Result<Option<Journal>, SubmitError> {
        let Some(keeper) = &self.store else {
            return Ok(None);
        };
        let files = bundle.files.values().map(|f| f.sha256.clone()).collect();
        self.stored_files.hold(id, files);
        let head = match self.stored_files.store(keeper, bundle, now_ms()).await {
            Ok(head) => head,
            Err(error) => {
                self.stored_files.release(id);
                return Err(SubmitError::Store(error.into()));
            }
        };
        let journal = Journal::start(
            keeper.clone(),
            id.clone(),
            head,
            durability,
            (0, None),
            &self.tracker,
        );
        Ok(Some(journal))
    }
}

/// A run asked for: its bundle and graph (parsed and validated, the graphs
/// it embeds in `family`), its input, the warnings so far, who asks, and
/// the span its trace hangs under (a subgraph node's child run).
pub(super) struct Submission<'a> {
    pub(super) bundle: Bundle,
    pub(super) graph: Planned,
    pub(super) family: Arc<Family>,
    pub(super) input_json: &'a str,
    /// Fields of the input given by reference: their texts, by field.
    pub(super) referenced: Vec<(String, Arc<str>)>,
    pub(super) warnings: Vec<String>,
    pub(super) owner: Owner,
    pub(super) trace_parent: Option<String>,
    /// For a child run, its parent run.
    pub(super) parent: Option<RunId>,
}

/// A submission's graph: planned already (a graph kept parsed,
/// [`super::parsed`]) or to be planned at admission (a child run's).
pub(super) enum Planned {
    Kept(Arc<RunPlan>),
    Fresh(Arc<Graph>),
}

impl Planned {
    fn graph(&self) -> &Graph {
        match self {
            Planned::Kept(plan) => plan.graph(),
            Planned::Fresh(graph) => graph,
        }
    }

    fn into_plan(self, limits: &RunLimits) -> Arc<RunPlan> {
        match self {
            Planned::Kept(plan) => plan,
            Planned::Fresh(graph) => RunPlan::new(graph, limits.clone()),
        }
    }
}

/// A new run's id: unique, and in the order runs are made.
pub(super) fn new_run_id() -> RunId {
    RunId::from(format!("run-{}", uuid::Uuid::now_v7().simple()))
}

/// A run the admission decision took: its machine made, not started.
pub(super) struct Admitted {
    pub(super) bundle: Bundle,
    pub(super) family: Arc<Family>,
    pub(super) plan: Arc<RunPlan>,
    pub(super) machine: RunMachine,
    pub(super) owner: Owner,
    pub(super) warnings: Vec<String>,
    /// A run of its own, not a subgraph node's child.
    pub(super) top_level: bool,
}

/// The admission decision, pure: the input read and checked against the
/// graph's state, the graph held to the run `limits`, the machine made.
fn admit(limits: &RunLimits, submission: Submission<'_>) -> Result<Admitted, SubmitError> {
    let Submission {
        bundle,
        graph,
        family,
        input_json,
        referenced,
        mut warnings,
        owner,
        trace_parent,
        parent,
    } = submission;
    let top_level = trace_parent.is_none();
    let mut input = read_input(&graph, input_json, top_level)?;
    let referenced_bytes = put_referenced(&graph, &mut input, referenced)?;
    warnings.extend(undeclared_input(graph.graph(), &input.values));
    let mut over = limits.check_graph(graph.graph());
    let knowledge = crate::graph::oversized_knowledge(
        graph.graph(),
        &bundle.files_beside_graph(),
        limits.max_knowledge_bytes,
    );
    over.extend(knowledge.into_iter().map(|finding| finding.message));
    if !over.is_empty() {
        return Err(SubmitError::OverLimits(over));
    }
    let plan = graph.into_plan(limits);
    let held: usize = input.held.values().map(|text| text.len()).sum();
    let mut machine = RunMachine::with_input(plan.clone(), input).map_err(|error| match error {
        RunError::InvalidInput { message } => SubmitError::Input(message),
        other => SubmitError::Input(other.to_string()),
    })?;
    metrics::counter!(crate::metrics::INPUT_BYTES_HELD).increment(held as u64);
    metrics::counter!(crate::metrics::INPUT_BYTES_REFERENCED).increment(referenced_bytes);
    machine.set_trace_parent(trace_parent);
    machine.set_parent(parent);
    machine.set_owner(owner.clone());
    Ok(Admitted {
        bundle,
        family,
        plan,
        machine,
        owner,
        warnings,
        top_level,
    })
}

/// A warning for each input key a graph that declares its state does not
/// declare (under `strict_state` the machine refuses them instead): a
/// misspelt key is otherwise kept silently beside the field it meant.
fn undeclared_input(graph: &Graph, input: &Map<String, Value>) -> Vec<String> {
    if graph.fields.is_empty() || graph.settings.strict_state {
        return Vec::new();
    }
    let declared: Vec<&str> = graph.fields.iter().map(|f| f.name.as_str()).collect();
    input
        .keys()
        .filter(|key| !declared.contains(&key.as_str()))
        .map(|key| {
            let hint = crate::graph::did_you_mean(key, &declared)
                .map(|name| format!(" (did you mean '{name}'?)"))
                .unwrap_or_default();
            format!(
                "warning: input key '{key}' is not a field `state:` declares{hint}; it is kept in the state as given"
            )
        })
        .collect()
}

/// Puts the texts of the fields given by reference into `input`, where
/// its text has `null` for each: held as the text they are when the plan
/// lets it hold them ([`RunInput::hold_text`]), parsed otherwise. Returns
/// their bytes.
fn put_referenced(
    graph: &Planned,
    input: &mut RunInput,
    referenced: Vec<(String, Arc<str>)>,
) -> Result<u64, SubmitError> {
    let plan = match graph {
        Planned::Kept(plan) => Some(plan),
        Planned::Fresh(_) => None,
    };
    let mut bytes = 0;
    for (field, text) in referenced {
        if input.values.get(&field) != Some(&Value::Null) {
            return Err(SubmitError::Input(format!(
                "input_refs names field '{field}', which the input does not have as null"
            )));
        }
        bytes += text.len() as u64;
        if let Some(plan) = plan
            && input.hold_text(plan, &field, &text)
        {
            continue;
        }
        let value = serde_json::from_str(&text)
            .map_err(|error| SubmitError::Input(format!("field '{field}': {error}")))?;
        input.values.insert(field, value);
    }
    Ok(bytes)
}

/// Reads a run's input: a top-level run of a planned graph holds the large
/// strings its coordinator never reads as their text ([`RunInput::read`]);
/// a child run, whose input its parent wrote, and any input that is not a
/// valid object are parsed whole (which says what is wrong).
fn read_input(graph: &Planned, text: &str, top_level: bool) -> Result<RunInput, SubmitError> {
    if let (Planned::Kept(plan), true) = (graph, top_level)
        && let Some(input) = RunInput::read(plan, text)
    {
        return Ok(input);
    }
    parse_input(text).map(RunInput::parsed)
}

fn parse_input(text: &str) -> Result<Map<String, Value>, SubmitError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(SubmitError::Input(format!(
            "the input must be a JSON object, got {}",
            crate::graph::json_type_name(&other)
        ))),
        Err(error) => Err(SubmitError::Input(format!(
            "the input is not JSON: {error} (line {}, column {})",
            error.line(),
            error.column()
        ))),
    }
}

/// The bundle's files as workers fetch them (the graph file aside).
pub(super) fn bundle_refs(bundle: &Bundle) -> Vec<BlobRef> {
    bundle
        .files
        .iter()
        .filter(|(path, _)| **path != bundle.graph_path)
        .map(|(path, file)| BlobRef {
            path: path.clone(),
            sha256: file.sha256.clone(),
            mode: file.mode,
        })
        .collect()
}
