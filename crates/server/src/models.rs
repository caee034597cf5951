//! [`Models`]: the named embedders a server answers for, each filled in once it has loaded.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use nornir_vector::Embedder;

/// A mistake in the set of models: a name given twice, an empty name, or a name the set does
/// not have.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelsError {
    Empty,
    BadName(String),
    Duplicate(String),
    Unknown { name: String, known: Vec<String> },
    AlreadyLoaded(String),
}

impl std::fmt::Display for ModelsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => write!(f, "no model to serve: give at least one"),
            Self::BadName(n) => {
                write!(f, "model name {n:?} is not usable: use letters, digits and - _ . only, and not empty")
            }
            Self::Duplicate(n) => write!(f, "model name {n:?} is given twice: give each model its own name"),
            Self::Unknown { name, known } => {
                write!(f, "no model is named {name:?}; the models are {}", known.join(", "))
            }
            Self::AlreadyLoaded(n) => write!(f, "model {n:?} is already loaded"),
        }
    }
}

impl std::error::Error for ModelsError {}

/// One served model.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) embedder: OnceLock<Arc<Embedder>>,
    /// Texts and tokens embedded for requests, for `/metrics`.
    pub(crate) texts: AtomicU64,
    pub(crate) tokens: AtomicU64,
}

/// The models a server answers for, in order: the first is the one TEI's routes use without a
/// `/models/{name}` prefix and OpenAI's use without a `model` field. Names are set up front;
/// each embedder is filled in when it has loaded, so the server can listen (and `/health` say
/// "loading") meanwhile.
#[derive(Debug)]
pub struct Models {
    pub(crate) entries: Vec<Entry>,
}

/// A name a URL path and a Prometheus label can hold as it is.
fn usable_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Models {
    /// The names of the models to serve, none loaded yet.
    pub fn new(names: impl IntoIterator<Item = String>) -> Result<Self, ModelsError> {
        let mut entries: Vec<Entry> = Vec::new();
        for name in names {
            if !usable_name(&name) {
                return Err(ModelsError::BadName(name));
            }
            if entries.iter().any(|e| e.name == name) {
                return Err(ModelsError::Duplicate(name));
            }
            entries.push(Entry {
                name,
                embedder: OnceLock::new(),
                texts: AtomicU64::new(0),
                tokens: AtomicU64::new(0),
            });
        }
        if entries.is_empty() {
            return Err(ModelsError::Empty);
        }
        Ok(Self { entries })
    }

    /// Model `name` has loaded: the server answers for it from now on.
    pub fn set_loaded(&self, name: &str, embedder: Arc<Embedder>) -> Result<(), ModelsError> {
        self.entry(name)?.embedder.set(embedder).map_err(|_| ModelsError::AlreadyLoaded(name.to_owned()))
    }

    /// The model names, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    /// Model `name`'s embedder, once it has loaded.
    pub fn get(&self, name: &str) -> Option<&Arc<Embedder>> {
        self.entries.iter().find(|e| e.name == name).and_then(|e| e.embedder.get())
    }

    /// Whether every model has loaded.
    pub fn all_loaded(&self) -> bool {
        self.entries.iter().all(|e| e.embedder.get().is_some())
    }

    pub(crate) fn entry(&self, name: &str) -> Result<&Entry, ModelsError> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| ModelsError::Unknown { name: name.to_owned(), known: self.names() })
    }

    pub(crate) fn first(&self) -> &Entry {
        &self.entries[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(Models::new(Vec::new()).unwrap_err(), ModelsError::Empty);
        let twice = Models::new(["a".to_owned(), "a".to_owned()]).unwrap_err();
        assert!(twice.to_string().contains("twice"), "{twice}");
        for bad in ["", "a b", "a/b", "x\"y"] {
            assert!(matches!(Models::new([bad.to_owned()]), Err(ModelsError::BadName(_))), "{bad:?}");
        }
        let m = Models::new(["bge-small".to_owned(), "e5.int8".to_owned()]).expect("names");
        assert_eq!(m.names(), ["bge-small", "e5.int8"]);
        assert!(!m.all_loaded() && m.get("bge-small").is_none());
        let e = m.entry("gte").unwrap_err().to_string();
        assert!(e.contains("bge-small, e5.int8"), "{e}");
    }
}
