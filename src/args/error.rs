//! The error of a bad command line or config file: what is wrong and what would be right.

use std::fmt;

/// One line saying what is wrong and what would be right; printed as `droce-pmd: error: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
