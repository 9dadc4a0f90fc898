//! Every error the core returns, in one enum, each with its class and a stable kind string.
//!
//! The Python binding turns a [`CoreError`] into the exception class [`ErrorClass`] names, with
//! `.kind` set to [`CoreError::kind`]; the kinds are listed in `docs/errors.md`.

use std::fmt;

use crate::apply::ApplyError;
use crate::graph::GraphError;
use crate::program::ProgramError;

/// The exception class an error maps to (the Python names without `Error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    Graph,
    Program,
    Param,
    Apply,
}

#[derive(Clone, Debug, PartialEq)]
pub enum CoreError {
    Graph(GraphError),
    Program(ProgramError),
    Apply(ApplyError),
}

impl CoreError {
    /// The class of the error.
    pub fn class(&self) -> ErrorClass {
        match self {
            CoreError::Graph(_) => ErrorClass::Graph,
            CoreError::Program(_) => ErrorClass::Program,
            CoreError::Apply(e) if e.is_param() => ErrorClass::Param,
            CoreError::Apply(_) => ErrorClass::Apply,
        }
    }

    /// The stable kind string (`"cycle"`, `"version"`, `"unknown_param"`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            CoreError::Graph(e) => e.kind.as_str(),
            CoreError::Program(e) => e.kind.as_str(),
            CoreError::Apply(e) => e.kind(),
        }
    }

    /// The message users see: what the error's own Display prints.
    pub fn message(&self) -> String {
        match self {
            CoreError::Graph(e) => e.message.clone(),
            CoreError::Program(e) => e.to_string(),
            CoreError::Apply(e) => e.to_string(),
        }
    }
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for CoreError {}

impl From<GraphError> for CoreError {
    fn from(e: GraphError) -> CoreError {
        CoreError::Graph(e)
    }
}

impl From<ProgramError> for CoreError {
    fn from(e: ProgramError) -> CoreError {
        CoreError::Program(e)
    }
}

impl From<ApplyError> for CoreError {
    fn from(e: ApplyError) -> CoreError {
        CoreError::Apply(e)
    }
}
