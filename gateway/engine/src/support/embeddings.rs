//! A static embedding model that tool search ranks with beside its words
//! (`search.model`): a table of one vector per token in the model2vec
//! layout, read with `model2vec-rs`. A text's vector is the mean of its
//! tokens' vectors, so embedding a request costs microseconds and needs
//! no model server.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use model2vec_rs::model::StaticModel;

/// The largest `model.safetensors` read (a multilingual model of 128M
/// parameters in f32 is about 500 MB).
pub const MAX_MODEL_BYTES: u64 = 1 << 30;
/// The largest `tokenizer.json` read.
const MAX_TOKENIZER_BYTES: u64 = 64 << 20;
/// The largest `config.json` read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Tokens of a text that are embedded; the rest of a longer text is left
/// out (a request's gist is at its start, a tool's in its first lines).
const MAX_TOKENS: usize = 256;

/// A loaded model.
pub struct Embeddings {
    model: StaticModel,
    dim: usize,
    /// The folder it was read from.
    pub path: PathBuf,
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("path", &self.path)
            .field("dim", &self.dim)
            .finish()
    }
}

/// Why a model could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddingsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is {size} bytes, more than the {max} a search model's file may have")]
    TooLarge { path: PathBuf, size: u64, max: u64 },
    #[error("{path} is not a model2vec model: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// The model last read, with the size and time of change of its weights:
/// a reload that names the same unchanged folder reuses it.
type Cached = (PathBuf, u64, Option<SystemTime>, Arc<Embeddings>);
static LAST: Mutex<Option<Cached>> = Mutex::new(None);

impl Embeddings {
    /// The model in the folder `dir`, read once while it is unchanged.
    pub fn load(dir: &Path) -> Result<Arc<Embeddings>, EmbeddingsError> {
        let weights = dir.join("model.safetensors");
        let meta = std::fs::metadata(&weights).map_err(|source| EmbeddingsError::Read {
            path: weights.clone(),
            source,
        })?;
        let changed = meta.modified().ok();
        let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((p, len, at, model)) = last.as_ref()
            && p == dir
            && *len == meta.len()
            && *at == changed
        {
            return Ok(Arc::clone(model));
        }
        let model = Arc::new(Embeddings::read(dir)?);
        *last = Some((dir.to_owned(), meta.len(), changed, Arc::clone(&model)));
        Ok(model)
    }

    fn read(dir: &Path) -> Result<Embeddings, EmbeddingsError> {
        let tokenizer = read_bounded(&dir.join("tokenizer.json"), MAX_TOKENIZER_BYTES)?;
        let weights = read_bounded(&dir.join("model.safetensors"), MAX_MODEL_BYTES)?;
        let config = read_bounded(&dir.join("config.json"), MAX_CONFIG_BYTES)?;
        // Vectors are normalised here, where a text with no known token
        // (a zero vector) is told apart.
        let model =
            StaticModel::from_bytes(tokenizer, weights, config, Some(false)).map_err(|e| {
                EmbeddingsError::Invalid {
                    path: dir.to_owned(),
                    reason: format!("{e:#}"),
                }
            })?;
        let dim = model.dim();
        if dim == 0 {
            return Err(EmbeddingsError::Invalid {
                path: dir.to_owned(),
                reason: "its vectors have no dimensions".into(),
            });
        }
        Ok(Embeddings {
            model,
            dim,
            path: dir.to_owned(),
        })
    }

    /// How many numbers a vector has.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The unit vector of `text` (its first `MAX_TOKENS` tokens), or
    /// `None` when none of its tokens is known to the model.
    pub fn embed(&self, text: &str) -> Option<Vec<f32>> {
        let mut v = self
            .model
            .encode_with_args(&[text.to_owned()], Some(MAX_TOKENS), 1)
            .pop()?;
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !norm.is_normal() || v.len() != self.dim {
            return None;
        }
        for x in &mut v {
            *x /= norm;
        }
        Some(v)
    }
}

/// The dot product of two vectors of one model (their cosine, as they are
/// unit vectors).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The bytes of `path`, refused above `max`.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, EmbeddingsError> {
    use std::io::Read;
    let read = |source| EmbeddingsError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let size = file.metadata().map_err(read)?.len();
    if size > max {
        return Err(EmbeddingsError::TooLarge {
            path: path.to_owned(),
            size,
            max,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(max + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > max {
        return Err(EmbeddingsError::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_without_a_model_is_refused_with_the_file_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let e = Embeddings::load(dir.path()).unwrap_err();
        assert!(e.to_string().contains("model.safetensors"), "{e}");
        std::fs::write(dir.path().join("model.safetensors"), b"not a model").unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), b"{}").unwrap();
        std::fs::write(dir.path().join("config.json"), b"{}").unwrap();
        let e = Embeddings::load(dir.path()).unwrap_err();
        assert!(
            matches!(e, EmbeddingsError::Invalid { .. }),
            "{e}: a file that is not a model is told apart"
        );
    }

    #[test]
    fn a_file_over_its_bound_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, vec![b' '; 64]).unwrap();
        let e = read_bounded(&path, 16).unwrap_err();
        assert!(
            matches!(e, EmbeddingsError::TooLarge { size: 64, .. }),
            "{e}"
        );
        assert_eq!(read_bounded(&path, 64).unwrap().len(), 64);
    }
}
