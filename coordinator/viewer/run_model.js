// What the run viewer shows of one run, as its events build it up:
// RunModel applies each event once (nodes, map items, loops, waves,
// failures), and fieldHistory reads the waves' changes. No DOM here.

// Everything the page shows of a run, as its events build it up.
export class RunModel {
  constructor() {
    this.nodes = new Map();     // id -> {status, attempts, error, child, answeredBy, resent, retrievals, retrieved, indexBuilt, throttled, usage, spent, cached, hits, notCached}
    this.maps = new Map();      // map node -> {total, done, items: Map(index -> {status, step, error})}
    this.loops = new Map();     // loop node -> [{iteration, max, done, reason}]
    this.waves = [];            // [{step, nodes, at, changes}]
    this.events = [];
    this.failures = [];         // [{node, item, error, fallback, at}]
    this.lastSeq = -1;
    this.lastOffset = -1;       // of the model output's pieces (applyPiece)
    this.containers = new Map(); // step -> map or loop node (from the diagram)
  }

  node(id) {
    if (!this.nodes.has(id)) this.nodes.set(id, { status: "pending", attempts: 0 });
    return this.nodes.get(id);
  }

  // What is known of node `id`, without making an entry: the one place
  // the diagram and the node panel read a node's status from.
  view(id) {
    return this.nodes.get(id) || { status: "pending", attempts: 0 };
  }

  map(id) {
    if (!this.maps.has(id)) this.maps.set(id, { total: null, done: 0, items: new Map() });
    return this.maps.get(id);
  }

  // The map whose item `item` of step `node` is, if the step is in one.
  itemOf(node, item) {
    if (item === null || item === undefined) return null;
    const container = this.containers.get(node);
    if (!container || !this.maps.has(container) && this.kind(container) !== "map") return null;
    const map = this.map(container);
    if (!map.items.has(item)) map.items.set(item, { status: "pending" });
    return map.items.get(item);
  }

  kind(id) { return this.kinds ? this.kinds.get(id) : undefined; }

  // A piece of the run's model output (`/stream`): the node's latest
  // attempt's text grows; a new attempt (or another item's step) starts
  // it afresh. Pieces come once each, in offset order.
  applyPiece(piece) {
    if (piece.offset <= this.lastOffset) return;
    this.lastOffset = piece.offset;
    const node = this.node(piece.node);
    const item = piece.item === undefined ? null : piece.item;
    let output = node.output;
    if (!output || output.attempt !== piece.attempt || output.item !== item) {
      output = { attempt: piece.attempt, item, text: "", tools: [], state: "writing" };
      node.output = output;
    }
    if (piece.kind === "text") output.text += piece.text;
    else if (piece.kind === "tool_call") output.tools.push("→ " + piece.text);
    else if (piece.kind === "tool_result") output.tools.push("← " + piece.text);
    else if (piece.kind === "message") output.tools.push("✉ " + piece.text);
    else if (piece.kind === "end") output.state = "done";
    else if (piece.kind === "abandoned") output.state = "abandoned";
    else if (piece.kind === "truncated") output.state = "truncated";
  }

  apply(event) {
    if (event.seq <= this.lastSeq) return;
    this.lastSeq = event.seq;
    this.events.push(event);
    const item = event.item === undefined ? null : event.item;
    switch (event.type) {
      case "wave_started":
        this.waves.push({ step: event.step, nodes: event.nodes, at: event.at_unix_ms, changes: null });
        for (const id of event.nodes) this.node(id).status = "running";
        break;
      case "node_started": {
        const entry = this.itemOf(event.node, item);
        const node = this.node(event.node);
        if (entry) { entry.status = "running"; entry.step = event.node; }
        node.status = "running";
        node.attempts = Math.max(node.attempts, event.attempt);
        break;
      }
      case "node_finished": {
        const entry = this.itemOf(event.node, item);
        const node = this.node(event.node);
        if (event.worker) node.worker = event.worker;
        if (event.usage) node.usage = addUsage(node.usage, event.usage);
        released(node, entry, item);
        if (entry) { entry.step = event.node; entry.worker = event.worker; }
        else node.status = "done";
        break;
      }
      case "node_cached": {
        // Its answer came from the node cache: it ran nowhere.
        const node = this.node(event.node);
        node.cached = { stored_by: event.stored_by, age_ms: event.age_ms, item };
        node.hits = (node.hits || 0) + 1;
        const entry = this.itemOf(event.node, item);
        if (entry) entry.cached = true;
        break;
      }
      case "node_not_cached":
        this.node(event.node).notCached = event.reason;
        break;
      case "node_retrying":
        this.node(event.node).error = event.error;
        break;
      case "task_redispatched": {
        // At-least-once made visible: the same attempt went out again.
        const node = this.node(event.node);
        node.resent = node.resent || [];
        node.resent.push(event.reason === "worker_lost"
          ? `attempt ${event.attempt} sent again: worker ${event.worker || "?"} was lost`
          : `attempt ${event.attempt} sent again: the coordinator that sent it stopped`);
        break;
      }
      case "task_throttled": {
        // Waiting in the coordinator's queue for a limit or a key, until
        // a call of the step goes or the step ends.
        const entry = this.itemOf(event.node, item);
        const node = this.node(event.node);
        const held = { limit: event.limit, wait_ms: event.wait_ms };
        node.held = node.held || new Map();
        node.held.set(item, held);
        node.throttled = held;
        node.throttles = (node.throttles || 0) + 1;
        if (entry) entry.throttled = held;
        break;
      }
      case "model_called":
        released(this.node(event.node), this.itemOf(event.node, item), item);
        break;
      case "node_failed": {
        this.failures.push(event);
        const entry = this.itemOf(event.node, item);
        released(this.node(event.node), entry, item);
        // A run's budget is spent: the step that would have crossed it.
        if (/budget_exceeded/.test(event.error || "")) this.node(event.node).spent = true;
        if (entry && !event.fallback) { entry.status = "failed"; entry.error = event.error; }
        const node = this.node(event.node);
        node.error = event.error;
        if (!entry && !event.fallback) node.status = "failed";
        break;
      }
      case "node_skipped":
        this.node(event.node).status = "skipped";
        break;
      case "state_changed": {
        const wave = this.waves.find((w) => w.step === event.step) || this.waves[this.waves.length - 1];
        if (wave) wave.changes = event;
        break;
      }
      case "map_item_finished": {
        const map = this.map(event.node);
        map.total = event.total;
        map.done = event.done;
        const entry = map.items.get(event.index) || {};
        entry.status = "done";
        map.items.set(event.index, entry);
        if (event.done === event.total) {
          this.node(event.node).status = "done";
          for (const [step, container] of this.containers) if (container === event.node) this.node(step).status = "done";
        }
        break;
      }
      case "loop_iteration": {
        if (!this.loops.has(event.node)) this.loops.set(event.node, []);
        this.loops.get(event.node).push(event);
        break;
      }
      case "subgraph_started":
        this.node(event.node).child = event.run_id;
        break;
      case "retrieved": {
        // A rag step's retrievals: how many, and the last one's hits.
        const node = this.node(event.node);
        node.retrievals = (node.retrievals || 0) + 1;
        node.retrieved = event;
        break;
      }
      case "index_built":
        this.node(event.node).indexBuilt = event;
        break;
      case "waiting_for_input":
        this.node(event.node).status = "waiting";
        break;
      case "input_received": {
        const node = this.node(event.node);
        node.status = "done";
        node.answeredBy = event.by;
        break;
      }
      case "run_retried":
        for (const node of this.nodes.values()) if (node.status === "failed") node.status = "pending";
        for (const map of this.maps.values()) for (const entry of map.items.values()) if (entry.status === "failed") entry.status = "pending";
        break;
      case "run_finished":
        for (const node of this.nodes.values()) if (node.status === "running") node.status = event.status === "cancelled" ? "pending" : node.status;
        break;
      default:
        break;
    }
  }
}

// A step (item `item`'s, or the node's own) that waited for a limit has
// gone (a call went, or it ended); the node stays throttled while any
// other of its steps waits.
function released(node, entry, item) {
  if (entry) entry.throttled = null;
  if (!node.held) return;
  node.held.delete(item);
  node.throttled = node.held.size ? [...node.held.values()].pop() : null;
}

// The sum of two usages (`usage` on node_finished), `a` maybe absent.
export function addUsage(a, b) {
  if (!a) return { ...b };
  const cost = a.cost === undefined && b.cost === undefined ? undefined : (a.cost || 0) + (b.cost || 0);
  return {
    calls: (a.calls || 0) + (b.calls || 0),
    prompt_tokens: (a.prompt_tokens || 0) + (b.prompt_tokens || 0),
    completion_tokens: (a.completion_tokens || 0) + (b.completion_tokens || 0),
    cached_tokens: (a.cached_tokens || 0) + (b.cached_tokens || 0),
    cost,
  };
}

// A usage in a line: "3 calls · 1200 prompt (512 cached) + 90 completion tokens · cost 0.0041".
export function usageText(usage) {
  if (!usage || !usage.calls) return "";
  const cached = usage.cached_tokens ? ` (${usage.cached_tokens} cached)` : "";
  const cost = usage.cost === undefined || usage.cost === null ? "" : ` · cost ${Number(usage.cost).toFixed(4)}`;
  return `${usage.calls} call${usage.calls === 1 ? "" : "s"} · ${usage.prompt_tokens} prompt${cached} + ${usage.completion_tokens} completion tokens${cost}`;
}

// The last value each field had before each wave, for showing what changed.
export function fieldHistory(waves) {
  const before = new Map();
  const out = [];
  for (const wave of waves) {
    if (!wave.changes) continue;
    const rows = wave.changes.fields.map((field) => {
      const values = wave.changes.values || {};
      const folded = wave.changes.folded || {};
      const row = { field, previous: before.get(field) };
      if (field in values) row.value = { value: values[field] };
      else if (field in folded) row.value = { folded: folded[field] };
      else row.value = { removed: true };
      before.set(field, row.value);
      return row;
    });
    out.push({ step: wave.step, nodes: wave.nodes, rows });
  }
  return out;
}

// What the wave at work had done by `point` (a point within a wave names
// the events its run's log held then), from the run's `events`:
// "fan: 2 of 4 items done; refine: iteration 1 done".
export function pointNote(events, point) {
  const before = events.filter((event) => event.seq < point);
  let start = 0;
  before.forEach((event, i) => { if (event.type === "wave_started") start = i + 1; });
  const said = new Map();
  for (const event of before.slice(start)) {
    switch (event.type) {
      case "map_item_finished": said.set(event.node, `${event.done} of ${event.total} items done`); break;
      case "loop_iteration": said.set(event.node, `iteration ${event.iteration} done`); break;
      case "subgraph_started": said.set(event.node, "child run started"); break;
      case "waiting_for_input": said.set(event.node, "waiting for an answer"); break;
      case "input_received": said.set(event.node, "answered"); break;
      default: break;
    }
  }
  return [...said].map(([node, what]) => `${node}: ${what}`).join("; ");
}

