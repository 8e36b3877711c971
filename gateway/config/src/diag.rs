//! Configuration diagnostics: every problem, with where and how to fix it.

use std::fmt;

use super::span::Pos;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The configuration is rejected.
    Error,
    /// The configuration loads; something in it is disabled.
    Warning,
}

/// One problem in the configuration: `file:line:column: what — how to fix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// The file, relative to the configuration folder.
    pub file: String,
    pub pos: Pos,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: String,
}

impl Diagnostic {
    pub fn error(
        file: &str,
        pos: Pos,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: file.to_owned(),
            pos,
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn warning(
        file: &str,
        pos: Pos,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, pos, message, hint)
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {level}: {} — {}",
            self.file, self.pos.line, self.pos.column, self.message, self.hint
        )
    }
}

/// A configuration that was rejected: all its errors (and warnings), in
/// file order.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigErrors {
    pub diagnostics: Vec<Diagnostic>,
}

impl ConfigErrors {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors().count();
        writeln!(
            f,
            "configuration has {n} error{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for d in &self.diagnostics {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Sorts diagnostics by file, then position, so output is stable.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by(|a, b| {
        (a.file.as_str(), a.pos.line, a.pos.column).cmp(&(
            b.file.as_str(),
            b.pos.line,
            b.pos.column,
        ))
    });
}
