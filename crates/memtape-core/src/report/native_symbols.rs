//! Symbolizing native frames at report time: a return address in a module becomes the
//! function it is in, with its source file and line where the module's file carries
//! debug information (DWARF, through `addr2line`; else the symbol table's name).
//!
//! The file is the one at the module's recorded path on the machine reading the capture.
//! When it is missing, or its GNU build id is not the one recorded, the frame reads as
//! `module+0xoffset` and a note says why.

use std::path::Path;

use rustc_hash::FxHashMap;

/// A module as its [`Record::Module`](crate::capture::Record::Module) described it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NativeModule {
    /// The file's path when it was loaded.
    pub path: String,
    /// The load bias.
    pub base: u64,
    /// The GNU build id (empty: none recorded).
    pub build_id: Vec<u8>,
    /// `PT_LOAD` segments: `(file address, size)`.
    pub segments: Vec<(u64, u64)>,
}

impl NativeModule {
    /// The file name alone (`libfoo.so`).
    pub fn short_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// What one native frame reads as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeSymbol {
    /// The source file, or the module's path when there is no line information.
    pub file: String,
    /// The function, or `module+0xoffset` when unknown.
    pub function: String,
    /// The line (0: unknown).
    pub line: u32,
}

/// Symbolizes `offsets` (return addresses as file addresses) of `module`; the note says
/// why the module could not be read, if so (every frame is then `module+0xoffset`).
pub fn symbolize_module(
    module: &NativeModule,
    offsets: &[u64],
) -> (FxHashMap<u64, NativeSymbol>, Option<String>) {
    let fallback = |offset: u64| match module.path.as_str() {
        // An address in no loaded object (generated code, a trampoline).
        "" => NativeSymbol {
            file: "<unknown module>".to_owned(),
            function: format!("{offset:#x}"),
            line: 0,
        },
        path => NativeSymbol {
            file: path.to_owned(),
            function: format!("{}+{offset:#x}", module.short_name()),
            line: 0,
        },
    };
    let unreadable = |why: String| {
        let all = offsets.iter().map(|&o| (o, fallback(o))).collect();
        (
            all,
            Some(format!(
                "native frames in {} are shown as module+offset: {why}",
                module.path
            )),
        )
    };
    if module.path.is_empty() || module.path.starts_with("linux-vdso") {
        return (offsets.iter().map(|&o| (o, fallback(o))).collect(), None);
    }
    match file_build_id(Path::new(&module.path)) {
        Err(e) => return unreadable(e),
        Ok(found)
            if !module.build_id.is_empty() && found.as_deref() != Some(&module.build_id[..]) =>
        {
            return unreadable(
                "the file on this machine is not the one that ran (its GNU build id differs)"
                    .to_owned(),
            )
        }
        Ok(_) => {}
    }
    let loader = match addr2line::Loader::new(&module.path) {
        Ok(loader) => loader,
        Err(e) => return unreadable(format!("cannot read its debug information ({e})")),
    };
    let mut out = FxHashMap::default();
    for &offset in offsets {
        // A return address points after the call: look up the call itself.
        let probe = offset.saturating_sub(1);
        let symbol = match lookup(&loader, probe) {
            // No line information: the module stands for the file.
            Some(s) if s.file.is_empty() => NativeSymbol {
                file: module.path.clone(),
                ..s
            },
            Some(s) => s,
            None => fallback(offset),
        };
        out.insert(offset, symbol);
    }
    (out, None)
}

/// The function (innermost, when inlined), with its file and line where DWARF has them.
fn lookup(loader: &addr2line::Loader, probe: u64) -> Option<NativeSymbol> {
    let symbol = loader.find_symbol(probe).map(|s| demangled(s, None));
    let mut frames = loader.find_frames(probe).ok()?;
    if let Ok(Some(frame)) = frames.next() {
        let function = frame
            .function
            .as_ref()
            .and_then(|f| f.demangle().ok().map(|n| n.into_owned()))
            .or(symbol.clone());
        if let Some(function) = function {
            let (file, line) = frame
                .location
                .map(|l| (l.file.map(str::to_owned), l.line.unwrap_or(0)))
                .unwrap_or((None, 0));
            return Some(NativeSymbol {
                file: file.unwrap_or_default(),
                function,
                line,
            });
        }
    }
    symbol.map(|function| NativeSymbol {
        file: String::new(),
        function,
        line: 0,
    })
}

fn demangled(name: &str, language: Option<addr2line::gimli::DwLang>) -> String {
    addr2line::demangle_auto(name.into(), language).into_owned()
}

/// The GNU build id of the ELF file at `path` (None: it has none).
fn file_build_id(path: &Path) -> Result<Option<Vec<u8>>, String> {
    use object::Object;
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "the file is missing on this machine".to_owned(),
        _ => format!("cannot open it ({e})"),
    })?;
    let cache = object::ReadCache::new(file);
    let parsed = object::File::parse(&cache).map_err(|e| format!("not an object file ({e})"))?;
    parsed
        .build_id()
        .map(|id| id.map(<[u8]>::to_vec))
        .map_err(|e| format!("cannot read its build id ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_reads_as_module_and_offset_with_a_note() {
        let module = NativeModule {
            path: "/nonexistent/libgone.so".into(),
            base: 0x7f00_0000_0000,
            build_id: vec![1, 2, 3],
            segments: vec![(0, 0x1000)],
        };
        let (symbols, note) = symbolize_module(&module, &[0x1139]);
        assert_eq!(symbols[&0x1139].function, "libgone.so+0x1139");
        assert_eq!(symbols[&0x1139].file, "/nonexistent/libgone.so");
        let note = note.unwrap();
        assert!(note.contains("/nonexistent/libgone.so"), "{note}");
        assert!(note.contains("missing"), "{note}");
    }

    #[test]
    fn a_build_id_mismatch_is_noted() {
        let exe = std::env::current_exe().unwrap();
        let module = NativeModule {
            path: exe.display().to_string(),
            base: 0,
            build_id: vec![0xde, 0xad],
            segments: vec![],
        };
        let (symbols, note) = symbolize_module(&module, &[0x10]);
        assert!(note.unwrap().contains("build id differs"));
        assert!(symbols[&0x10].function.ends_with("+0x10"));
    }
}
