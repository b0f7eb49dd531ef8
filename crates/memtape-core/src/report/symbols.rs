//! The string, frame and stack tables of a capture, and the frames of a stack.
//!
//! Records may define a stack after the allocations that use it, so the tables are only
//! read once the whole capture has been fed. A stack that is never defined (the process
//! died before its frames were resolved) reads as one `<unresolved>` frame; in a capture
//! read around a damaged block, where that is the likely cause, as one
//! `<lost in damaged block>` frame.

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap, FxHashSet};

use super::import_frames::{
    fold_name, is_machinery_file, kept_when_hidden, module_name, outermost_tower, ImportFrames,
    MODULE_BODY,
};
use super::native_symbols::{symbolize_module, NativeModule};
use super::record::Record;

/// The name shown for what the capture never resolved.
pub const UNRESOLVED: &str = "<unresolved>";
/// The name shown for what the capture never defined when the reader skipped damage:
/// the definition was most likely in the part lost.
pub const LOST_IN_DAMAGE: &str = "<lost in damaged block>";

/// String id of [`UNRESOLVED`] (never a capture id: those are dense from 1).
const UNRESOLVED_ID: u32 = u32::MAX;
/// String id of the empty string (the function of a per-file group).
const EMPTY_ID: u32 = u32::MAX - 1;

/// A frame by string ids: cheap to hash and compare while grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameKey {
    /// String id of the file name.
    pub filename: u32,
    /// String id of the function name.
    pub function: u32,
    /// Line number (0: unknown, or a per-file group).
    pub line: u32,
}

impl FrameKey {
    /// The frame of a stack the capture never resolved.
    pub const UNRESOLVED: FrameKey = FrameKey {
        filename: UNRESOLVED_ID,
        function: UNRESOLVED_ID,
        line: 0,
    };

    /// This frame's file alone: no function, line 0 (a per-file group).
    pub fn file_only(self) -> FrameKey {
        FrameKey {
            filename: self.filename,
            function: EMPTY_ID,
            line: 0,
        }
    }
}

/// A resolved frame, borrowing its names from [`Symbols`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameRef<'s> {
    /// File name.
    pub filename: &'s str,
    /// Function name.
    pub function: &'s str,
    /// Line number.
    pub line: u32,
}

/// Strings, frames and stacks, from the records that define them.
#[derive(Debug, Default)]
pub struct Symbols {
    strings: FxHashMap<u32, Box<str>>,
    frames: FxHashMap<u32, FrameKey>,
    /// Stack id -> (parent stack id, frame id).
    stacks: FxHashMap<u32, (u32, u32)>,
    /// Files of the launcher (`memtape run`'s own code, runpy): outermost frames in them
    /// are left out of stacks, keeping at least one frame.
    launcher_files: Vec<String>,
    /// Names shown instead of some file names (string id -> name): a notebook cell's
    /// generated file shows as `Cell In[3]`.
    shown_as: FxHashMap<u32, Box<str>>,
    /// Modules native frames refer to, by id.
    modules: FxHashMap<u32, NativeModule>,
    /// Native frames not symbolized yet: frame id -> (module id, file address).
    native_frames: FxHashMap<u32, (u32, u64)>,
    /// Names found by symbolization, with their string ids (counting down below the
    /// reserved ids; capture ids count up from 1).
    local_strings: FxHashMap<Box<str>, u32>,
    /// Why some native frames read as module+offset.
    native_notes: Vec<String>,
    /// How stacks show import machinery (see [`Symbols::set_import_frames`]); None: as
    /// recorded.
    imports: Option<ImportFrames>,
    /// String ids of the files whose frames may be import machinery.
    machinery_files: FxHashSet<u32>,
    /// String ids of `<module>`.
    module_bodies: FxHashSet<u32>,
    /// With [`ImportFrames::Fold`]: the fold frame's name (string id) by importing frame
    /// (None: a tower at the outer end), and the name of an import seen loading no module.
    fold_names: FxHashMap<Option<FrameKey>, u32>,
    fold_unknown: u32,
    /// The reader skipped a damaged part: undefined names read as [`LOST_IN_DAMAGE`].
    damaged: bool,
}

/// Whether `filename` is one of the launcher `files`, or starts with one of them that ends
/// in a path separator (a directory).
pub fn is_launcher_file(files: &[String], filename: &str) -> bool {
    files.iter().any(|f| {
        if f.ends_with('/') || f.ends_with('\\') {
            filename.starts_with(f.as_str())
        } else {
            filename == f
        }
    })
}

impl Symbols {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }

    /// The capture was read around a damaged part: what it never defined may have been
    /// defined there, and reads as [`LOST_IN_DAMAGE`] rather than [`UNRESOLVED`].
    pub fn mark_damaged(&mut self) {
        self.damaged = true;
    }

    /// The name of what the capture never defined: [`UNRESOLVED`], or [`LOST_IN_DAMAGE`]
    /// after [`mark_damaged`](Self::mark_damaged).
    pub fn unresolved_name(&self) -> &'static str {
        if self.damaged {
            LOST_IN_DAMAGE
        } else {
            UNRESOLVED
        }
    }

    /// Takes in a record; only strings, frames and stacks matter here.
    #[inline]
    pub fn feed(&mut self, record: &Record<'_>) {
        match *record {
            Record::String { id, value } => {
                self.strings.insert(id, value.into());
            }
            Record::Frame {
                id,
                filename,
                name,
                line,
            } => {
                self.frames.insert(
                    id,
                    FrameKey {
                        filename,
                        function: name,
                        line,
                    },
                );
            }
            Record::Stack { id, parent, frame } => {
                self.stacks.insert(id, (parent, frame));
            }
            Record::Module {
                id,
                path,
                base,
                build_id,
                segments,
            } => {
                self.modules.insert(
                    id,
                    NativeModule {
                        path: path.to_owned(),
                        base,
                        build_id: build_id.to_vec(),
                        segments: segments.iter().collect(),
                    },
                );
            }
            Record::NativeFrame { id, module, offset } => {
                self.native_frames.insert(id, (module, offset));
            }
            _ => {}
        }
    }

    /// Turns every native frame fed so far into a frame with names: the function, and
    /// its file and line where the module's file on this machine has debug information
    /// (else `module+0xoffset`, with a note in [`Symbols::native_notes`]).
    pub fn symbolize_native(&mut self) {
        let mut by_module: FxHashMap<u32, Vec<(u32, u64)>> = FxHashMap::default();
        for (&frame, &(module, offset)) in &self.native_frames {
            by_module.entry(module).or_default().push((frame, offset));
        }
        self.native_frames.clear();
        let mut modules: Vec<_> = by_module.into_iter().collect();
        modules.sort_unstable_by_key(|(id, _)| *id);
        for (module_id, frames) in modules {
            // Module 0 (or one never defined): an address in no loaded object.
            let module = self.modules.get(&module_id).cloned().unwrap_or_default();
            let offsets: Vec<u64> = frames.iter().map(|f| f.1).collect();
            let (symbols, note) = symbolize_module(&module, &offsets);
            self.native_notes.extend(note);
            for (frame, offset) in frames {
                let Some(symbol) = symbols.get(&offset) else {
                    continue;
                };
                let key = FrameKey {
                    filename: self.local_string(&symbol.file),
                    function: self.local_string(&symbol.function),
                    line: symbol.line,
                };
                self.frames.insert(frame, key);
            }
        }
    }

    /// Why some native frames read as module+offset (one line per module).
    pub fn native_notes(&self) -> &[String] {
        &self.native_notes
    }

    fn local_string(&mut self, value: &str) -> u32 {
        if let Some(&id) = self.local_strings.get(value) {
            return id;
        }
        let id = EMPTY_ID - 1 - self.local_strings.len() as u32;
        self.local_strings.insert(value.into(), id);
        self.strings.insert(id, value.into());
        id
    }

    /// Number of stacks defined.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// The string with id `id` as shown (see [`Symbols::show_files_as`]); [`UNRESOLVED`]
    /// when the capture never defined it.
    pub fn name(&self, id: u32) -> &str {
        match self.shown_as.get(&id) {
            Some(shown) => shown,
            None => self.recorded_name(id),
        }
    }

    /// The string with id `id` as recorded.
    fn recorded_name(&self, id: u32) -> &str {
        match id {
            EMPTY_ID => "",
            _ => self.strings.get(&id).map_or(self.unresolved_name(), |s| s),
        }
    }

    /// The frame with id `id`; unresolved when the capture never defined it.
    fn frame_key(&self, id: u32) -> FrameKey {
        self.frames
            .get(&id)
            .copied()
            .unwrap_or(FrameKey::UNRESOLVED)
    }

    /// Leaves the outermost frames whose file is one of `files`, or starts with one that
    /// ends in a path separator, out of every stack (at least one frame stays): the
    /// program launcher's frames below the program's own.
    pub fn hide_launcher_frames(&mut self, files: Vec<String>) {
        self.launcher_files = files;
    }

    /// Shows each recorded string that is a key of `names` as its value (a file name a
    /// person can read for a generated one). Launcher files still match the recorded names.
    /// Call once the whole capture has been fed.
    pub fn show_files_as(&mut self, names: &std::collections::HashMap<String, String>) {
        self.shown_as = self
            .strings
            .iter()
            .filter_map(|(&id, value)| names.get(&**value).map(|n| (id, n.as_str().into())))
            .collect();
    }

    /// Sets how stacks show import machinery from now on (see
    /// [`import_frames`](super::import_frames)); until called, every frame is shown as
    /// recorded. Call once the whole capture has been fed (and native frames symbolized).
    pub fn set_import_frames(&mut self, mode: ImportFrames) {
        self.imports = Some(mode);
        self.machinery_files = self
            .strings
            .iter()
            .filter(|(_, v)| is_machinery_file(v))
            .map(|(&id, _)| id)
            .collect();
        self.module_bodies = self
            .strings
            .iter()
            .filter(|(_, v)| &***v == MODULE_BODY)
            .map(|(&id, _)| id)
            .collect();
        self.fold_names.clear();
        if mode != ImportFrames::Fold || self.machinery_files.is_empty() {
            return;
        }
        // Each importing frame's modules, from every stack that shows one loading.
        let mut modules: FxHashMap<Option<FrameKey>, BTreeSet<String>> = FxHashMap::default();
        let mut keys = Vec::new();
        let mut ids: Vec<u32> = self.stacks.keys().copied().collect();
        ids.sort_unstable();
        for stack in ids {
            keys.clear();
            self.trimmed_keys_into(stack, &mut keys);
            let Some((start, module)) = self.outermost_tower(&keys) else {
                continue;
            };
            let names = modules.entry(keys.get(start + 1).copied()).or_default();
            if let Some(m) = module {
                names.insert(module_name(self.recorded_name(keys[m].filename)));
            }
        }
        self.fold_unknown = self.local_string(&fold_name(&BTreeSet::new()));
        for (importer, names) in modules {
            let id = self.local_string(&fold_name(&names));
            self.fold_names.insert(importer, id);
        }
    }

    /// How stacks show import machinery.
    pub fn import_frames(&self) -> ImportFrames {
        self.imports.unwrap_or(ImportFrames::Show)
    }

    fn is_machinery(&self, key: FrameKey) -> bool {
        self.machinery_files.contains(&key.filename) && !self.module_bodies.contains(&key.function)
    }

    fn outermost_tower(&self, keys: &[FrameKey]) -> Option<(usize, Option<usize>)> {
        outermost_tower(
            keys.len(),
            |i| self.is_machinery(keys[i]),
            |i| self.module_bodies.contains(&keys[i].function),
        )
    }

    /// Applies the import mode to the frames of one stack at `out[base..]`.
    fn apply_import_frames(&self, out: &mut Vec<FrameKey>, base: usize) {
        // Most stacks hold no import frame: leave them before any work.
        if !out[base..]
            .iter()
            .any(|k| self.machinery_files.contains(&k.filename))
        {
            return;
        }
        match self.import_frames() {
            ImportFrames::Show => {}
            ImportFrames::Hide => {
                let frames = &out[base..];
                let keep = kept_when_hidden(
                    frames.len(),
                    |i| self.is_machinery(frames[i]),
                    |i| self.module_bodies.contains(&frames[i].function),
                );
                let mut i = 0;
                out.retain(|_| {
                    i += 1;
                    i <= base || keep[i - 1 - base]
                });
            }
            ImportFrames::Fold => {
                let Some((start, _)) = self.outermost_tower(&out[base..]) else {
                    return;
                };
                let importer = out.get(base + start + 1).copied();
                let fold = FrameKey {
                    filename: importer.map_or(EMPTY_ID, |k| k.filename),
                    function: self
                        .fold_names
                        .get(&importer)
                        .copied()
                        .unwrap_or(self.fold_unknown),
                    line: importer.map_or(0, |k| k.line),
                };
                out.drain(base..=base + start);
                out.insert(base, fold);
            }
        }
    }

    fn is_launcher(&self, key: FrameKey) -> bool {
        is_launcher_file(&self.launcher_files, self.recorded_name(key.filename))
    }

    /// Appends the frames of `stack` to `out`, innermost first. Stack 0 has none; an
    /// undefined stack (or parent) ends the walk with one unresolved frame. Launcher
    /// frames at the outer end are left out (see [`Symbols::hide_launcher_frames`]), and
    /// import machinery is shown as [`Symbols::set_import_frames`] says.
    pub fn frame_keys_into(&self, stack: u32, out: &mut Vec<FrameKey>) {
        let base = out.len();
        self.trimmed_keys_into(stack, out);
        self.apply_import_frames(out, base);
    }

    /// The frames of `stack` less the launcher's, every import frame kept.
    fn trimmed_keys_into(&self, stack: u32, out: &mut Vec<FrameKey>) {
        let base = out.len();
        self.walk_keys_into(stack, out);
        if !self.launcher_files.is_empty() {
            let mut end = out.len();
            while end > base + 1 && self.is_launcher(out[end - 1]) {
                end -= 1;
            }
            out.truncate(end);
        }
    }

    fn walk_keys_into(&self, stack: u32, out: &mut Vec<FrameKey>) {
        let mut id = stack;
        // A walk through distinct defined stacks visits at most that many: a longer one
        // is a cycle in a damaged capture, cut short like an undefined parent.
        let mut budget = self.stacks.len();
        while id != 0 {
            match self.stacks.get(&id) {
                Some(&(parent, frame)) if budget > 0 => {
                    budget -= 1;
                    out.push(self.frame_key(frame));
                    id = parent;
                }
                _ => {
                    out.push(FrameKey::UNRESOLVED);
                    return;
                }
            }
        }
    }

    /// The frames of `stack`, innermost first, as keys.
    pub fn frame_keys(&self, stack: u32) -> Vec<FrameKey> {
        let mut out = Vec::new();
        self.frame_keys_into(stack, &mut out);
        out
    }

    /// A frame key with its names.
    pub fn resolve(&self, key: FrameKey) -> FrameRef<'_> {
        FrameRef {
            filename: self.name(key.filename),
            function: self.name(key.function),
            line: key.line,
        }
    }

    /// The frames of `stack`, innermost first: `(filename, function, line)`.
    pub fn frames_of(&self, stack: u32) -> Vec<FrameRef<'_>> {
        self.frame_keys(stack)
            .into_iter()
            .map(|k| self.resolve(k))
            .collect()
    }
}

#[cfg(test)]
mod import_tests;
#[cfg(test)]
mod launcher_tests;
#[cfg(test)]
mod native_tests;
#[cfg(test)]
mod tests;
