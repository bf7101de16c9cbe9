//! A job kind's stages as types: one enum of tasks and one of results, a variant per
//! stage, declared with [`stages!`](crate::stages).
//!
//! ```text
//! kind: Task::Map(MapTask) ─► encode ─► TaskSpec { id: map-00003, body: JSON } ─► wire, journal
//! kind: Task::Map(MapTask) ◄─ decode(stage "map", body) ◄─────────────────────────┘
//! ```
//!
//! The engine moves task and result bodies as opaque JSON ([`Payload`]); this module is
//! the one place they become a kind's types again. The stage name in the task id picks
//! the variant, so a kind matches on its own enums (the compiler checks every stage is
//! handled) and never on stage strings; a stage the kind does not have, or a body that
//! does not decode, is one error here.

use crate::error::{EngineError, Result};
use crate::protocol::Payload;

/// A kind's tasks (or its results): one variant per stage.
pub trait StageSet: Sized + Send + Sync + std::fmt::Debug + Clone + 'static {
    /// The stage names, in the order the stages run.
    const STAGES: &'static [&'static str];
    /// The stage this value belongs to.
    fn stage(&self) -> &'static str;
    /// The value's body (without its stage, which its task id carries).
    fn encode(&self) -> Result<Payload>;
    /// The body of a task (or result) of stage `stage`, as the variant of that stage.
    fn decode(stage: &str, body: &Payload) -> Result<Self>;
}

/// A kind's stages as a plain enum, one variant per stage (no payload): what a driver
/// is asked for ([`crate::kind::Driver::stage`]), what a stage's progress and an
/// attempt's files are keyed by. Declared by [`stages!`](crate::stages).
pub trait Stage: Copy + Eq + Ord + Send + Sync + std::fmt::Debug + 'static {
    /// Every stage, in the order the stages run.
    const ALL: &'static [Self];
    /// Its name (in task ids, journals and messages).
    fn name(self) -> &'static str;
    /// The stage named `name`.
    fn named(name: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                unknown_stage(
                    name,
                    &Self::ALL.iter().map(|s| s.name()).collect::<Vec<_>>(),
                )
            })
    }
}

/// A kind's tasks, with the results they give: [`Stages::Done`] pairs a task with its
/// result of the same stage, so a kind checks a result without an "other stage" arm.
pub trait Stages: StageSet {
    /// The results, one variant per stage.
    type Output: StageSet;
    /// The stages, one variant each.
    type Stage: Stage;
    /// A task and its result, one variant per stage.
    type Done<'a>;
    /// `self` and `output` paired; `None` when they are of different stages (the engine
    /// decodes a result by its task's stage, so that does not happen).
    fn done<'a>(&'a self, output: &'a Self::Output) -> Option<Self::Done<'a>>;
}

/// The error for a body that does not decode as its stage's type.
pub fn undecodable(stage: &str, what: &str, e: serde_json::Error) -> EngineError {
    EngineError::Protocol(format!("a {stage} {what} that does not decode: {e}"))
}

/// The error for a stage the kind does not have.
pub fn unknown_stage(stage: &str, stages: &[&str]) -> EngineError {
    EngineError::Protocol(format!(
        "no stage {stage:?} in this job kind (its stages: {stages:?}): run the same \
         probeflow release everywhere"
    ))
}

/// Declares a kind's stages: its task enum, its result enum and the enum pairing a
/// task with its result, one variant per stage, from `Variant(stage name): TaskType
/// => ResultType` lines, with their [`Stages`] and [`StageSet`] implementations.
///
/// ```ignore
/// probeflow_engine::stages! {
///     /// The word-count job's tasks.
///     pub enum Task, Output, Done {
///         Count(COUNT): CountTask => CountOutput,
///         Merge(MERGE): MergeTask => MergeOutput,
///     }
/// }
/// ```
#[macro_export]
macro_rules! stages {
    // One enum's StageSet: `$what` ("task" or "result") names its bodies in errors.
    (@set $Enum:ident, $what:literal, $( $Variant:ident($name:expr) ),+) => {
        impl $crate::stages::StageSet for $Enum {
            const STAGES: &'static [&'static str] = &[$($name),+];
            fn stage(&self) -> &'static str {
                match self { $( Self::$Variant(_) => $name, )+ }
            }
            fn encode(&self) -> $crate::error::Result<$crate::protocol::Payload> {
                let encoded = match self {
                    $( Self::$Variant(v) => $crate::protocol::Payload::encode(v), )+
                };
                encoded.map_err(|e| $crate::error::EngineError::Internal(format!(
                    "a {} {} that does not encode: {e}", self.stage(), $what
                )))
            }
            fn decode(
                stage: &str,
                body: &$crate::protocol::Payload,
            ) -> $crate::error::Result<Self> {
                $(
                    if stage == $name {
                        return body.decode().map(Self::$Variant).map_err(|e| {
                            $crate::stages::undecodable(stage, $what, e)
                        });
                    }
                )+
                Err($crate::stages::unknown_stage(stage, Self::STAGES))
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $Task:ident, $Output:ident, $Done:ident, $Stage:ident {
            $( $Variant:ident($name:expr): $T:ty => $O:ty ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis enum $Task { $( $Variant($T), )+ }

        #[doc = concat!("The results of [`", stringify!($Task), "`], one variant per stage.")]
        #[derive(Debug, Clone)]
        $vis enum $Output { $( $Variant($O), )+ }

        #[doc = concat!("A [`", stringify!($Task), "`] and its result, one variant per stage.")]
        #[derive(Debug, Clone, Copy)]
        $vis enum $Done<'a> { $( $Variant(&'a $T, &'a $O), )+ }

        #[doc = concat!("The stages of [`", stringify!($Task), "`], in the order they run.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $Stage { $( $Variant, )+ }

        impl $crate::stages::Stage for $Stage {
            const ALL: &'static [Self] = &[$( Self::$Variant ),+];
            fn name(self) -> &'static str {
                match self { $( Self::$Variant => $name, )+ }
            }
        }

        $crate::stages!(@set $Task, "task", $( $Variant($name) ),+);
        $crate::stages!(@set $Output, "result", $( $Variant($name) ),+);

        impl $crate::stages::Stages for $Task {
            type Output = $Output;
            type Stage = $Stage;
            type Done<'a> = $Done<'a>;
            #[allow(unreachable_patterns)]
            fn done<'a>(&'a self, output: &'a $Output) -> Option<$Done<'a>> {
                match (self, output) {
                    $( (Self::$Variant(t), $Output::$Variant(o)) => Some($Done::$Variant(t, o)), )+
                    _ => None,
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Split {
        file: String,
    }
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Counted {
        words: u64,
    }
    const SPLIT: &str = "split";

    crate::stages! {
        /// Test stages.
        enum Task, Output, Done, Step {
            Split(SPLIT): Split => Counted,
            Sum("sum"): u32 => u64,
        }
    }

    #[test]
    fn a_body_decodes_as_its_stages_variant_and_encodes_without_its_stage() {
        let task = Task::Split(Split {
            file: "a.txt".into(),
        });
        assert_eq!(task.stage(), "split");
        let body = task.encode().unwrap();
        assert_eq!(body.json(), r#"{"file":"a.txt"}"#);
        let Task::Split(back) = Task::decode("split", &body).unwrap() else {
            panic!("not the split variant");
        };
        assert_eq!(back.file, "a.txt");
        assert!(matches!(
            Task::decode("sum", &Payload::encode(&7u32).unwrap()).unwrap(),
            Task::Sum(7)
        ));
        assert_eq!(Task::STAGES, ["split", "sum"]);
        assert_eq!(Output::STAGES, Task::STAGES);
        assert_eq!(Step::ALL, [Step::Split, Step::Sum]);
        assert_eq!(Step::Sum.name(), "sum");
        assert_eq!(Step::named("split").unwrap(), Step::Split);
        assert!(Step::named("merge")
            .unwrap_err()
            .to_string()
            .contains("\"merge\""));
    }

    #[test]
    fn an_unknown_stage_and_a_wrong_body_are_errors_that_say_which() {
        let err = Task::decode("reduce", &Payload::null())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"reduce\"") && err.contains("[\"split\", \"sum\"]"),
            "{err}"
        );
        let err = Output::decode("split", &Payload::encode(&"x").unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("split result that does not decode"), "{err}");
    }

    #[test]
    fn a_task_pairs_only_with_a_result_of_its_stage() {
        let task = Task::Sum(3);
        assert!(matches!(task.done(&Output::Sum(9)), Some(Done::Sum(3, 9))));
        assert!(task.done(&Output::Split(Counted { words: 1 })).is_none());
        let split = Task::Split(Split { file: "a".into() });
        let counted = Output::Split(Counted { words: 1 });
        assert!(matches!(
            split.done(&counted),
            Some(Done::Split(s, c)) if s.file == "a" && c.words == 1
        ));
    }
}
