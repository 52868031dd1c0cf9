//! `[localize]`: how `fusegrpo localize` and `fusegrpo mcp` run the
//! localizer on a user's issue (no effect on training or evaluation).

use serde::{Deserialize, Serialize};

/// `[localize]`. Not part of what a resume compares (left out of a run's
/// config when at its defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalizeSection {
    /// The temperature of several attempts (`--attempts N`, N > 1) when
    /// `[sampling] temperature` is 0 (greedy), where they would all be the
    /// same episode; 0 refuses several greedy attempts instead.
    pub attempts_temperature: f64,
    /// The most tokens an issue keeps: a longer one is cut to its beginning
    /// and its end (`--max-issue-tokens`). Unset: half of what
    /// `[episode] max_total_tokens` leaves after the prompt's fixed part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_issue_tokens: Option<usize>,
}

impl Default for LocalizeSection {
    fn default() -> Self {
        LocalizeSection { attempts_temperature: 0.7, max_issue_tokens: None }
    }
}

impl LocalizeSection {
    pub fn is_default(&self) -> bool {
        self == &LocalizeSection::default()
    }

    /// `(key, message)` of a value out of range.
    pub fn validate(&self) -> std::result::Result<(), (&'static str, String)> {
        if !(self.attempts_temperature >= 0.0 && self.attempts_temperature.is_finite()) {
            return Err(("attempts_temperature", format!("must be a number >= 0 (0: several greedy attempts are refused), got {}", self.attempts_temperature)));
        }
        if self.max_issue_tokens == Some(0) {
            return Err(("max_issue_tokens", "must be at least 1 (leave it out for the default)".into()));
        }
        Ok(())
    }

    /// The temperature `attempts` attempts sample at: `given` (a flag or a
    /// tool argument) if any; else the config's `sampling` one, or, for
    /// several attempts under greedy sampling, `attempts_temperature`.
    /// An error says why several greedy attempts are refused.
    pub fn temperature(&self, sampling: f64, attempts: usize, given: Option<f64>) -> std::result::Result<f64, String> {
        if let Some(t) = given {
            if !(t >= 0.0 && t.is_finite()) {
                return Err(format!("temperature {t}: must be a number >= 0 (0: greedy)"));
            }
            if t == 0.0 && attempts > 1 {
                return Err(format!("{attempts} attempts at temperature 0 (greedy) would be the same episode {attempts} times: give a temperature above 0, or one attempt"));
            }
            return Ok(t);
        }
        if sampling > 0.0 || attempts < 2 {
            return Ok(sampling);
        }
        if self.attempts_temperature == 0.0 {
            return Err(format!(
                "{attempts} attempts under greedy sampling ([sampling] temperature = 0) would be the same episode {attempts} times, and [localize] attempts_temperature = 0 refuses them: give --temperature T (T > 0), or one attempt"
            ));
        }
        Ok(self.attempts_temperature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_greedy_attempts_sample_at_the_attempts_temperature_or_are_refused() {
        let l = LocalizeSection::default();
        assert_eq!(l.temperature(0.0, 1, None), Ok(0.0));
        assert_eq!(l.temperature(0.0, 4, None), Ok(0.7));
        assert_eq!(l.temperature(1.0, 4, None), Ok(1.0));
        assert_eq!(l.temperature(0.0, 4, Some(0.3)), Ok(0.3));
        assert_eq!(l.temperature(0.0, 1, Some(0.0)), Ok(0.0));
        assert!(l.temperature(0.0, 4, Some(0.0)).unwrap_err().contains("same episode 4 times"));
        assert!(l.temperature(0.0, 1, Some(-1.0)).unwrap_err().contains(">= 0"));
        let refuse = LocalizeSection { attempts_temperature: 0.0, ..l };
        assert!(refuse.temperature(0.0, 2, None).unwrap_err().contains("attempts_temperature = 0"));
    }
}
