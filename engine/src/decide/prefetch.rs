//! Resolving many sibling paths in one pass over their parent object.
//!
//! A set whose rules test many fields of one object (`input.context.f0` …
//! `input.context.f39`) would otherwise look each up in that object's sorted
//! map, about log₂(n) string comparisons apiece. When such paths are needed
//! on every request (the index's paths, and the guards of rules every request
//! is checked against), one walk over the object's entries, each looked up in
//! a hash map of the wanted keys, fills them all at once.

use foldhash::HashMap;

use crate::dialect::native::{PathKey, Seg};
use crate::dialect::value::Val;
use crate::input::InputDoc;

/// Below this many wanted keys of one object, separate lookups are as cheap.
const MIN_SIBLINGS: usize = 4;

/// A walk pays off while the object has at most this many entries per
/// wanted key (a hash lookup per entry against a tree search per key).
const MAX_ENTRIES_PER_KEY: usize = 8;

/// The sibling groups of a policy set.
#[derive(Debug, Default)]
pub(crate) struct Prefetch {
    groups: Vec<Group>,
}

#[derive(Debug)]
struct Group {
    parent: PathKey,
    /// Wanted key → its slot in the set's path table.
    children: HashMap<Box<str>, u32>,
}

impl Prefetch {
    /// Groups the `hot` slots of `paths` (those read on every request) by
    /// parent object, keeping groups large enough to be worth a walk.
    pub(crate) fn new(paths: &[PathKey], hot: impl IntoIterator<Item = u32>) -> Prefetch {
        let mut by_parent: Vec<Group> = Vec::new();
        for slot in hot {
            let Some((root, segs)) = paths.get(slot as usize) else {
                continue;
            };
            let Some((Seg::Key(key), parent)) = segs.split_last() else {
                continue;
            };
            let parent = (*root, Box::<[Seg]>::from(parent));
            let group = match by_parent.iter().position(|g| g.parent == parent) {
                Some(pos) => &mut by_parent[pos],
                None => {
                    by_parent.push(Group {
                        parent,
                        children: HashMap::default(),
                    });
                    by_parent.last_mut().expect("just pushed")
                }
            };
            group.children.insert(key.clone(), slot);
        }
        by_parent.retain(|g| g.children.len() >= MIN_SIBLINGS);
        Prefetch { groups: by_parent }
    }

    /// Fills the cache of `doc` for every group whose object is small enough.
    pub(crate) fn run(&self, doc: &InputDoc<'_>) {
        for group in &self.groups {
            let Some(Val::Object(map)) = doc.resolve(&group.parent) else {
                continue;
            };
            if map.len() > group.children.len() * MAX_ENTRIES_PER_KEY {
                continue;
            }
            for (key, value) in map {
                if let Some(&slot) = group.children.get(key.as_str()) {
                    doc.fill(slot, Val::of(value));
                }
            }
        }
    }
}
