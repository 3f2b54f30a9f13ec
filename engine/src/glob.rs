//! `action_pattern` globs: `*` matches any run of characters, `?` exactly one.

/// A compiled `action_pattern`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionGlob {
    pattern: Vec<char>,
}

impl ActionGlob {
    /// Compiles a glob. Every string is a valid glob.
    pub fn new(pattern: &str) -> ActionGlob {
        ActionGlob {
            pattern: pattern.chars().collect(),
        }
    }

    /// Whether `text` matches the whole pattern. Linear in practice: a `*`
    /// remembers one backtrack point, the classic wildcard algorithm.
    pub fn matches(&self, text: &str) -> bool {
        let p = &self.pattern;
        let t: Vec<char> = text.chars().collect();
        let (mut pi, mut ti) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == '*')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        let cases = [
            ("delete_*", "delete_repo", true),
            ("delete_*", "undelete_repo", false),
            ("*_repo", "delete_repo", true),
            ("get_?", "get_x", true),
            ("get_?", "get_xy", false),
            ("*", "", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("exact", "exact", true),
        ];
        for (p, t, want) in cases {
            assert_eq!(ActionGlob::new(p).matches(t), want, "{p} ~ {t}");
        }
    }
}
