//! The strings every trace entry repeats: its keys, its action names, `""` and
//! `"unknown"`. With shared
//! frames the pickle writes each once and repeats it from the memo; naming them by a
//! small index (not by their text) keeps that lookup off the per-entry path.

/// One repeated string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Name {
    Action,
    Addr,
    Size,
    Stream,
    TimeUs,
    CompileContext,
    UserMetadata,
    Category,
    Frames,
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    /// `""`: `compile_context`, and `user_metadata` without an op.
    Empty,
    /// `"unknown"`: the `category` of an entry without an op.
    Unknown,
}

/// How many [`Name`]s there are.
pub(super) const NAME_COUNT: usize = Name::Unknown as usize + 1;

impl Name {
    /// Its text, as written.
    pub(super) const fn text(self) -> &'static str {
        match self {
            Name::Action => "action",
            Name::Addr => "addr",
            Name::Size => "size",
            Name::Stream => "stream",
            Name::TimeUs => "time_us",
            Name::CompileContext => "compile_context",
            Name::UserMetadata => "user_metadata",
            Name::Category => "category",
            Name::Frames => "frames",
            Name::Alloc => "alloc",
            Name::FreeRequested => "free_requested",
            Name::FreeCompleted => "free_completed",
            Name::SegmentAlloc => "segment_alloc",
            Name::SegmentFree => "segment_free",
            Name::Empty => "",
            Name::Unknown => "unknown",
        }
    }
}
