//! One update of a backend as it is stored, reported by the API and told
//! to notifiers: from what to what, how far it got, and how it ended.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::CatalogDiff;
use crate::config::{BackendConfig, RuntimeKind, Transport};

/// How far an update got. The first three are in progress; the last two
/// are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The new version is starting and being judged.
    Starting,
    /// Ready, waiting for an operator to approve or abort its diff.
    Held,
    /// Serving; the old version is kept until `bake` ends.
    Baking,
    Succeeded,
    RolledBack,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Held => "held",
            Phase::Baking => "baking",
            Phase::Succeeded => "succeeded",
            Phase::RolledBack => "rolled_back",
        }
    }

    pub fn parse(text: &str) -> Option<Phase> {
        [
            Phase::Starting,
            Phase::Held,
            Phase::Baking,
            Phase::Succeeded,
            Phase::RolledBack,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }

    /// Whether the update has ended.
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::RolledBack)
    }
}

/// What a version runs, as far as an operator needs to tell two apart:
/// the image (containers), the command line (processes). Never the
/// environment, which may hold secrets; a value `${NAME}` put into the
/// command line is masked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

impl Spec {
    /// What `cfg` runs.
    pub fn of(cfg: &BackendConfig) -> Spec {
        let mask = |s: &String| {
            cfg.substituted
                .iter()
                .filter(|v| !v.is_empty())
                .fold(s.clone(), |s, v| s.replace(v.as_str(), "****"))
        };
        match (&cfg.runtime, &cfg.transport) {
            (RuntimeKind::Container(c), _) => Spec {
                image: Some(c.image.clone()),
                command: c.command.as_ref().map(mask),
                args: c.args.iter().map(mask).collect(),
            },
            (_, Transport::Stdio { command, args, .. }) => Spec {
                image: None,
                command: Some(mask(command)),
                args: args.iter().map(mask).collect(),
            },
            _ => Spec::default(),
        }
    }

    /// How an operator names this version in a sentence: the image, or
    /// the command line.
    pub fn label(&self) -> String {
        match &self.image {
            Some(image) => image.clone(),
            None => std::iter::once(self.command.clone().unwrap_or_default())
                .chain(self.args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// One update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateRecord {
    /// Unique among the backend's updates; also names a candidate
    /// container (`vigil-NAME-ID`).
    pub id: String,
    pub backend: String,
    pub strategy: String,
    pub from: Spec,
    pub to: Spec,
    /// Shown as `state`, like an instance's.
    #[serde(rename = "state")]
    pub phase: Phase,
    /// Why it was rolled back (or what else an operator should know).
    pub reason: Option<String>,
    /// What the new version lists differently, once it listed.
    pub diff: Option<CatalogDiff>,
    /// Who started it.
    pub principal: String,
    /// Who approved its held diff, if anyone did.
    pub approved_by: Option<String>,
    /// The image the config file named when it started: an image update
    /// through the API stands in for it (across restarts) until the file
    /// names another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<String>,
    #[serde(with = "rfc3339")]
    pub started_at: SystemTime,
    #[serde(with = "rfc3339::option")]
    pub ended_at: Option<SystemTime>,
}

/// Times as RFC 3339 text, in the store and in the API alike.
mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_millis(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(&text).map_err(D::Error::custom)
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<SystemTime>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| humantime::parse_rfc3339_weak(&text).map_err(D::Error::custom))
                .transpose()
        }
    }
}

impl UpdateRecord {
    /// Ends an update Vigil stopped (or was killed) in the middle of, the
    /// one rule for both: before the switch it is rolled back (the old
    /// version serves after the restart), while baking it succeeded (the
    /// new version was serving).
    pub fn interrupted(&mut self, now: SystemTime) {
        if self.phase == Phase::Baking {
            self.phase = Phase::Succeeded;
            self.reason = Some(
                "Vigil stopped while the new version was baking; the new version serves".into(),
            );
        } else {
            self.phase = Phase::RolledBack;
            self.reason = Some(super::Rejected::Interrupted.to_string());
        }
        self.ended_at = Some(now);
    }
}

/// A fresh update id: milliseconds since the epoch in base 36 (short,
/// URL- and container-name-safe, ordered by time).
pub fn new_id(now: SystemTime) -> String {
    let mut n = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut out = Vec::new();
    loop {
        let d = (n % 36) as u8;
        out.push(if d < 10 { b'0' + d } else { b'a' + d - 10 });
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    format!("u{}", String::from_utf8_lossy(&out))
}
