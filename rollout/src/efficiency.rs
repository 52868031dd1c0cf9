//! Tool efficiency e (DESIGN.md, "Efficiency e"): the mean novelty of the
//! episode's calls, in call order.

use crate::entities::EntitySet;

/// e = mean over calls of g_i = |E_i \ H_i| / |E_i|, with H_i the union of
/// all earlier calls' entities (earlier calls of the same turn included) and
/// g_i = 0 for an empty E_i. Returns 0 for no calls.
pub fn efficiency(calls: &[EntitySet]) -> f64 {
    if calls.is_empty() {
        return 0.0;
    }
    let mut seen = EntitySet::new();
    let mut total = 0.0;
    for entities in calls {
        if !entities.is_empty() {
            let new = entities.iter().filter(|e| !seen.contains(e)).count();
            total += new as f64 / entities.len() as f64;
            seen.extend(entities.iter().cloned());
        }
    }
    total / calls.len() as f64
}
