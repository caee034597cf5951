//! The session part of `doctor`'s report: the embedder's own report (the keys of `/info`, Python's
//! `report()` and `bench --json`), or why no session could be built. The same type is written by
//! `doctor --json` and read back from the child of `doctor --isolate`.

use nornir_vector::Vendor;
use serde::{Deserialize, Deserializer, Serialize};

use crate::args::ModelArgs;

/// What really runs the model, or why nothing does.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum SessionDoc {
    /// The library's report, with node placement.
    #[cfg(feature = "embed-ort")]
    Running(Box<nornir_vector::EmbedderReport>),
    Failed(FailedSession),
}

/// Why no session could be built.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailedSession {
    /// One line.
    pub error: String,
    /// The device was forced to this vendor and none of its providers could run the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_vendor: Option<Vendor>,
    /// With a forced device: each provider's registration and preflight, so a script can read
    /// which library was missing.
    #[cfg(feature = "embed-ort")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registrations: Vec<nornir_vector::diagnostics::Registration>,
}

impl<'de> Deserialize<'de> for SessionDoc {
    /// A failed session is the object with an `error` key; any other is the library's report.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let failed = value.get("error").is_some();
        #[cfg(feature = "embed-ort")]
        if !failed {
            return serde_json::from_value(value).map(|r| Self::Running(Box::new(r))).map_err(serde::de::Error::custom);
        }
        #[cfg(not(feature = "embed-ort"))]
        let _ = failed;
        serde_json::from_value(value).map(Self::Failed).map_err(serde::de::Error::custom)
    }
}

impl SessionDoc {
    pub fn failed(error: String) -> Self {
        Self::Failed(FailedSession {
            error,
            forced_vendor: None,
            #[cfg(feature = "embed-ort")]
            registrations: Vec::new(),
        })
    }

    /// Where the model really runs, when it runs.
    pub fn gpu_vendor(&self) -> Option<Vendor> {
        match self {
            #[cfg(feature = "embed-ort")]
            Self::Running(r) => Some(r.session.gpu_vendor),
            Self::Failed(_) => None,
        }
    }
}

/// Builds the embedder and reports what really runs, with node placement.
#[cfg(feature = "embed-ort")]
pub fn session_doc(m: &ModelArgs) -> SessionDoc {
    match crate::commands::load(m) {
        Err(e) => {
            let mut failed = FailedSession {
                error: crate::commands::error_line(&e),
                forced_vendor: None,
                registrations: Vec::new(),
            };
            if let Some(nornir_vector::EmbedError::ForcedDeviceFailed { vendor, registrations, .. }) =
                e.downcast_ref::<nornir_vector::EmbedError>()
            {
                failed.forced_vendor = Some(*vendor);
                failed.registrations = registrations.clone();
            }
            SessionDoc::Failed(failed)
        }
        Ok(e) => {
            e.warm_up();
            SessionDoc::Running(Box::new(e.describe_with_placement()))
        }
    }
}

#[cfg(not(feature = "embed-ort"))]
pub fn session_doc(_: &ModelArgs) -> SessionDoc {
    SessionDoc::failed(crate::commands::NOT_COMPILED.to_owned())
}
