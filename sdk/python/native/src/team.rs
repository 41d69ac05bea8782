//! A `teammates: true` step's seat in its team, for a Python handler:
//! `weft.team.Team` wraps it. Sends and waits block the handler's thread
//! (the interpreter let go meanwhile) on the worker's own team link.

use std::time::Duration;

use pyo3::prelude::*;
use weft_worker::{Team, TeamError, TeamMessage};

use crate::bridge::{bridge, raise};
use crate::runtime;
use crate::values::{from_python, to_python};

/// One step's seat: its identity, the members, its inbox.
#[pyclass(module = "weft._native", frozen)]
pub(crate) struct TeamSeat {
    team: Team,
}

impl TeamSeat {
    pub(crate) fn new(team: Team) -> Self {
        Self { team }
    }
}

#[pymethods]
impl TeamSeat {
    /// This item's identity, `MAP/INDEX`.
    #[getter]
    fn me(&self) -> &str {
        self.team.me()
    }

    /// Every member's identity, this item's included.
    #[getter]
    fn members(&self) -> Vec<String> {
        self.team.members().to_vec()
    }

    /// Sends `content` (any JSON value) to `to`; returns once the
    /// coordinator has taken it, or raises `weft.TeamError` with why not
    /// (within `timeout` seconds).
    fn send(
        &self,
        py: Python<'_>,
        to: &str,
        content: &Bound<'_, PyAny>,
        timeout: f64,
    ) -> PyResult<()> {
        let content = from_python(content)
            .map_err(|why| team_error(py, TeamError::Content(why).to_string()))?;
        let team = self.team.clone();
        let wait = seconds(timeout);
        let sent = py.detach(|| {
            runtime::handle()
                .block_on(async { tokio::time::timeout(wait, team.send(to, content)).await })
        });
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(team_error(py, error.to_string())),
            Err(_) => Err(team_error(py, TeamError::Disconnected.to_string())),
        }
    }

    /// Every message that has arrived, without waiting; reading takes
    /// them.
    fn inbox<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.team
            .inbox()
            .into_iter()
            .map(|message| message_of(py, message))
            .collect()
    }

    /// The next message, waiting up to `timeout` seconds; `None` if none
    /// came.
    fn recv<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Option<Bound<'py, PyAny>>> {
        let team = self.team.clone();
        let wait = seconds(timeout);
        let message = py.detach(|| runtime::handle().block_on(team.recv(wait)));
        message.map(|message| message_of(py, message)).transpose()
    }
}

/// A teammate message as `weft.Message`.
fn message_of(py: Python<'_>, message: TeamMessage) -> PyResult<Bound<'_, PyAny>> {
    let content = to_python(py, &message.content)?;
    bridge(py)?
        .message
        .bind(py)
        .call1((message.from, content, message.seq))
}

fn team_error(py: Python<'_>, message: String) -> PyErr {
    match bridge(py) {
        Ok(classes) => raise(py, &classes.team_error, (message,)),
        Err(error) => error,
    }
}

/// `timeout` seconds, none when negative or not a number.
fn seconds(timeout: f64) -> Duration {
    Duration::try_from_secs_f64(timeout).unwrap_or(Duration::ZERO)
}
