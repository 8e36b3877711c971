//! The documents of one API description and `$ref` resolution between
//! them: the spec itself and the files its relative `$ref`s name, each
//! read once, within a size and a count cap.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::ImportError;

/// The spec's dialect, for what differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Swagger2,
    OpenApi3,
}

/// The largest document read (GitHub's description is 13 MB).
pub const MAX_DOCUMENT_BYTES: u64 = 64 << 20;
/// The most documents one import reads (the spec and the files it refers to).
pub const MAX_DOCUMENTS: usize = 64;

/// Index of a document in [`Documents`].
pub type DocId = usize;

/// The spec (document 0) and every document a `$ref` has named so far.
#[derive(Debug)]
pub struct Documents {
    docs: Vec<Document>,
}

#[derive(Debug)]
struct Document {
    path: Option<PathBuf>,
    value: Value,
}

impl Documents {
    /// Reads the spec at `path` (YAML or JSON).
    pub fn from_file(path: &Path) -> Result<Self, ImportError> {
        let value = read_document(path)?;
        Ok(Documents {
            docs: vec![Document {
                path: Some(path.to_path_buf()),
                value,
            }],
        })
    }

    /// A spec already parsed; relative-file `$ref`s resolve against `path`
    /// when given, and are refused otherwise.
    pub fn from_value(value: Value, path: Option<PathBuf>) -> Self {
        Documents {
            docs: vec![Document { path, value }],
        }
    }

    /// The spec itself.
    pub fn root(&self) -> &Value {
        &self.docs[0].value
    }

    /// Resolves `reference` found in document `doc`: a local `#/json/pointer`
    /// or a relative file with an optional pointer (`common.yaml#/Pet`).
    /// Returns the document the target lives in, a key naming the target
    /// (for cycle detection) and the target.
    pub fn resolve(
        &mut self,
        doc: DocId,
        reference: &str,
    ) -> Result<(DocId, String, Value), String> {
        let (file, pointer) = match reference.split_once('#') {
            Some((file, pointer)) => (file, pointer),
            None => (reference, ""),
        };
        let target_doc = if file.is_empty() {
            doc
        } else {
            self.load_relative(doc, file)?
        };
        let pointer = percent_decode(pointer);
        let value = if pointer.is_empty() {
            Some(&self.docs[target_doc].value)
        } else {
            self.docs[target_doc].value.pointer(&pointer)
        };
        let value = value.ok_or_else(|| format!("`$ref: {reference}` points at nothing"))?;
        Ok((target_doc, format!("{target_doc}#{pointer}"), value.clone()))
    }

    fn load_relative(&mut self, from: DocId, file: &str) -> Result<DocId, String> {
        if file.contains("://") {
            return Err(format!(
                "`$ref: {file}` is remote; only local and relative-file references are followed (download it next to the spec)"
            ));
        }
        let base = self.docs[from]
            .path
            .as_deref()
            .and_then(Path::parent)
            .ok_or_else(|| {
                format!("`$ref: {file}` names a file, but the spec was not read from a file")
            })?;
        let path = base.join(file);
        if let Some(i) = self
            .docs
            .iter()
            .position(|d| d.path.as_deref() == Some(&path))
        {
            return Ok(i);
        }
        if self.docs.len() >= MAX_DOCUMENTS {
            return Err(format!(
                "`$ref: {file}` would read more than {MAX_DOCUMENTS} documents"
            ));
        }
        let value = read_document(&path).map_err(|e| e.to_string())?;
        self.docs.push(Document {
            path: Some(path),
            value,
        });
        Ok(self.docs.len() - 1)
    }
}

/// Reads a YAML or JSON document of at most [`MAX_DOCUMENT_BYTES`].
fn read_document(path: &Path) -> Result<Value, ImportError> {
    let io = |source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_DOCUMENT_BYTES {
        return Err(ImportError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_DOCUMENT_BYTES,
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    parse(&text).map_err(|message| ImportError::Parse {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses a YAML or JSON document (JSON is YAML; JSON is tried first, as
/// it is much faster for large specs).
pub fn parse(text: &str) -> Result<Value, String> {
    if text.trim_start().starts_with('{')
        && let Ok(v) = serde_json::from_str(text)
    {
        return Ok(v);
    }
    let yaml: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    Ok(yaml_to_json(yaml))
}

/// YAML to JSON, with non-string keys (`200:` in `responses`) as strings.
fn yaml_to_json(value: serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Value::Null, Value::Number)
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (key_string(k), yaml_to_json(v)))
                .collect::<Map<_, _>>(),
        ),
        Y::Tagged(tagged) => yaml_to_json(tagged.value),
    }
}

fn key_string(key: serde_yaml::Value) -> String {
    match key {
        serde_yaml::Value::String(s) => s,
        other => match yaml_to_json(other) {
            Value::String(s) => s,
            v => v.to_string(),
        },
    }
}

/// `%7B` and the like in a `$ref`'s fragment.
fn percent_decode(pointer: &str) -> String {
    if !pointer.contains('%') {
        return pointer.to_string();
    }
    let bytes = pointer.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_keys_that_are_numbers_become_strings() {
        let v = parse("responses:\n  200:\n    description: ok\n").unwrap();
        assert_eq!(v["responses"]["200"]["description"], "ok");
    }

    #[test]
    fn local_and_percent_encoded_pointers_resolve() {
        let mut docs = Documents::from_value(
            serde_json::json!({"paths": {"/a/{id}": {"x": 1}}, "c": {"s": {"type": "string"}}}),
            None,
        );
        assert_eq!(docs.resolve(0, "#/c/s").unwrap().2["type"], "string");
        assert_eq!(docs.resolve(0, "#/paths/~1a~1%7Bid%7D").unwrap().2["x"], 1);
        assert!(docs.resolve(0, "#/c/missing").is_err());
        assert!(
            docs.resolve(0, "other.yaml#/x")
                .unwrap_err()
                .contains("not read from a file")
        );
        assert!(
            docs.resolve(0, "https://example.com/x.yaml")
                .unwrap_err()
                .contains("remote")
        );
    }
}
