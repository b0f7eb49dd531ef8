//! Reading the native stack: the unwinder and the loaded objects it walks through.

mod eval_probe;
pub(crate) mod loaded_modules;
mod module_sections;
pub(crate) mod native_stacks;
mod pointer_auth_cfi;
mod rule_ways;
mod stack_top;
