//! The multi-host suite (issue #20): `deploy/docker-compose.yml` brought up
//! for real — three etcd members, three coordinators, workers — each in
//! its own container with its own address, and faults applied to the
//! containers: killed, paused, cut off a network, stopped and started. The
//! coordinators are one leader and two standbys, or (`partitions`) a group
//! of six partitions led by all three. Every test asserts that nothing
//! acknowledged is lost and nothing is merged twice.
//!
//! Needs the images of `deploy/images/build.sh` (`.ci/run` builds them);
//! the observability services of the compose file are a profile that is
//! not started here, since their images come from a registry.

mod cluster;
mod coordinators;
mod etcd_members;
mod ledger;
mod partitions;
mod workers;
