//! The skill router: before each turn, the skills are scored on their declared triggers against
//! the prompt, and the best ones, within a count and a token budget, become the turn's active
//! skills (their instructions in the dynamic tail, their tools narrowing what the model is
//! offered). See docs/context.md, "The skill router".

use super::compaction::BYTES_PER_TOKEN;
use super::skills::{Skill, SkillSet};
use globset::{Glob, GlobSet, GlobSetBuilder};
use regex::Regex;
use std::collections::BTreeSet;

/// What a keyword found in the prompt adds to a skill's score.
const KEYWORD_SCORE: u32 = 1;
/// What a pattern that matches the prompt adds.
const PATTERN_SCORE: u32 = 2;
/// What a file glob matching a path named in the prompt adds.
const FILE_SCORE: u32 = 2;

/// A skill the router scored above zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scored {
    /// The skill's name.
    pub name: String,
    /// Its score.
    pub score: u32,
    /// What matched, e.g. `keyword "pdf"`, `file "*.pdf"`.
    pub matched: Vec<String>,
}

/// The router's choice for one turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Routing {
    /// The active skills, best first.
    pub active: Vec<Scored>,
    /// Skills that scored but did not fit the count or the token budget.
    pub left_out: Vec<Scored>,
}

impl Routing {
    /// The `processing` note announcing the choice (None when no skill scored).
    pub(crate) fn note(&self) -> Option<String> {
        if self.active.is_empty() && self.left_out.is_empty() {
            return None;
        }
        let list = |v: &[Scored]| {
            v.iter()
                .map(|s| format!("{} (score {}: {})", s.name, s.score, s.matched.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let mut out = format!("skills active: {}", list(&self.active));
        if self.active.is_empty() {
            out = "skills active: none".to_string();
        }
        if !self.left_out.is_empty() {
            out.push_str(&format!(
                "; left out by the budget (max_active_skills, active_skills_max_tokens): {}",
                list(&self.left_out)
            ));
        }
        Some(out)
    }

    /// The tools the active skills allow, when every active skill declares its tools (a skill
    /// that declares none narrows nothing); None: no narrowing.
    pub(crate) fn allowed_tools(&self, skills: &SkillSet) -> Option<BTreeSet<String>> {
        if self.active.is_empty() {
            return None;
        }
        let mut out = BTreeSet::new();
        for a in &self.active {
            let tools = skills.get(&a.name)?.tools.as_ref()?;
            out.extend(tools.iter().cloned());
        }
        Some(out)
    }
}

/// Scores every skill against `prompt` and picks the active set: by score (then name), at most
/// `max_active`, while their instructions fit `max_tokens` (estimated at 4 bytes a token).
pub(crate) fn route(
    skills: &SkillSet,
    prompt: &str,
    max_active: usize,
    max_tokens: u64,
) -> Routing {
    let mut scored: Vec<(Scored, u64)> = skills
        .skills
        .iter()
        .filter_map(|s| score(s, prompt).map(|sc| (sc, cost(s))))
        .collect();
    scored.sort_by(|(a, _), (b, _)| b.score.cmp(&a.score).then_with(|| a.name.cmp(&b.name)));
    let mut routing = Routing::default();
    let mut used = 0u64;
    for (s, tokens) in scored {
        if routing.active.len() < max_active && used + tokens <= max_tokens {
            used += tokens;
            routing.active.push(s);
        } else {
            routing.left_out.push(s);
        }
    }
    routing
}

/// The estimated tokens of a skill's instructions.
fn cost(s: &Skill) -> u64 {
    (s.instructions.len() as u64).div_ceil(BYTES_PER_TOKEN)
}

/// A skill's score on `prompt`; None when nothing matched.
fn score(s: &Skill, prompt: &str) -> Option<Scored> {
    let t = &s.triggers;
    if t.is_empty() {
        return None;
    }
    let lower = prompt.to_lowercase();
    let mut out = Scored {
        name: s.name.clone(),
        score: 0,
        matched: Vec::new(),
    };
    for k in &t.keywords {
        let k = k.trim().to_lowercase();
        if !k.is_empty() && holds_word(&lower, &k) {
            out.score += KEYWORD_SCORE;
            out.matched.push(format!("keyword \"{k}\""));
        }
    }
    for p in &t.patterns {
        // Checked when the skill was loaded; one that fails here only scores nothing.
        if Regex::new(p).is_ok_and(|re| re.is_match(prompt)) {
            out.score += PATTERN_SCORE;
            out.matched.push(format!("pattern \"{p}\""));
        }
    }
    if !t.files.is_empty() {
        let words = path_words(prompt);
        for f in &t.files {
            let Some(set) = glob_set(f) else { continue };
            if words.iter().any(|w| set.is_match(w)) {
                out.score += FILE_SCORE;
                out.matched.push(format!("file \"{f}\""));
            }
        }
    }
    (out.score > 0).then_some(out)
}

/// A glob matched against a whole path and against its file name alone (so `*.pdf` matches
/// `docs/a.pdf`).
fn glob_set(glob: &str) -> Option<GlobSet> {
    let mut b = GlobSetBuilder::new();
    b.add(Glob::new(glob).ok()?);
    if !glob.contains('/') {
        b.add(Glob::new(&format!("**/{glob}")).ok()?);
    }
    b.build().ok()
}

/// Whether `text` holds `word` (both lowercase) with no letter or digit right before or after it.
fn holds_word(text: &str, word: &str) -> bool {
    let edge = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
    text.match_indices(word).any(|(i, _)| {
        edge(text[..i].chars().next_back()) && edge(text[i + word.len()..].chars().next())
    })
}

/// The prompt's words that may name files: split on white space, quotes and brackets stripped,
/// and a sentence's final punctuation.
fn path_words(prompt: &str) -> Vec<&str> {
    prompt
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| "\"'`()[]{}<>,;:".contains(c))
                .trim_end_matches(['.', '!', '?'])
        })
        .filter(|w| !w.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tinyelf::context::skills::{SkillSource, Triggers};

    fn skill(name: &str, triggers: Triggers, tools: Option<&[&str]>, instr: usize) -> Skill {
        Skill {
            name: name.into(),
            description: "d".into(),
            path: "/x".into(),
            source: SkillSource::Config,
            triggers,
            tools: tools.map(|t| t.iter().map(ToString::to_string).collect()),
            instructions: "x".repeat(instr),
        }
    }

    fn kw(words: &[&str]) -> Triggers {
        Triggers {
            keywords: words.iter().map(ToString::to_string).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn scores_axes_and_budget() {
        let set = SkillSet {
            skills: vec![
                skill("pdf", kw(&["pdf", "fill form"]), Some(&["read_file"]), 40),
                skill(
                    "files",
                    Triggers {
                        files: vec!["*.pdf".into()],
                        patterns: vec![r"\bv\d+\b".into()],
                        ..Default::default()
                    },
                    Some(&["glob"]),
                    40,
                ),
                skill("big", kw(&["pdf"]), None, 40_000),
                skill("none", Triggers::default(), None, 4),
                skill("deploy", kw(&["deploy"]), None, 4),
            ],
            problems: vec![],
        };
        let r = route(&set, "Please fill form docs/a.pdf (PDF v2).", 3, 1000);
        let names: Vec<(&str, u32)> = r
            .active
            .iter()
            .map(|s| (s.name.as_str(), s.score))
            .collect();
        assert_eq!(names, [("files", 4), ("pdf", 2)]);
        assert_eq!(r.left_out[0].name, "big");
        assert!(r.note().unwrap().contains("left out by the budget"));
        assert_eq!(
            r.allowed_tools(&set)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            ["glob", "read_file"]
        );
        // Whole words only; the count caps the set.
        assert!(
            route(&set, "pdfs and redeployment", 3, 1000)
                .active
                .is_empty()
        );
        let r = route(&set, "pdf", 1, 100_000);
        assert_eq!(r.active.len(), 1);
        assert_eq!(r.left_out.len(), 1);
        // A skill without tools narrows nothing.
        let r = route(&set, "deploy the v3 release", 3, 1000);
        assert_eq!(r.active.len(), 2);
        assert!(r.allowed_tools(&set).is_none());
        assert!(route(&set, "hello", 3, 1000).note().is_none());
    }
}
