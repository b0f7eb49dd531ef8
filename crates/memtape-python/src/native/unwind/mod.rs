//! Reading the native stack: the unwinder and the loaded objects it walks through.

pub(crate) mod loaded_modules;
pub(crate) mod native_stacks;
