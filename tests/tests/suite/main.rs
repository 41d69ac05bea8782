//! The multi-process suite, one test binary for all of it: each module
//! starts real coordinators, workers, `weft` commands and etcd servers.
//! One binary rather than one per file keeps the build's disk use and
//! link time down (each binary links the whole client and worker).
mod agents;
mod allocator;
mod auth;
mod cli;
mod cli_edges;
mod cluster;
mod conformance;
mod containment;
mod deploy;
mod durability;
mod etcd_tls;
mod flow_budgets;
mod flow_control;
mod flow_queues;
mod ha;
mod held;
mod history;
mod hostile;
mod llm;
mod local;
mod loops;
mod node_cache;
mod partitions;
mod python;
mod python_bundles;
mod retrieval;
mod shared_slots;
mod store;
mod streaming;
mod subgraphs;
mod teammates;
mod tls;
mod traces;
mod transport;
mod viewer;
mod workers;
