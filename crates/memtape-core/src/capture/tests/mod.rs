//! Whole-file tests: round trips, files old versions wrote, truncation at every byte, byte
//! flips, foreign input, the limits, a bounded stand-in for the fuzzer, and the size/speed
//! measurement (slow).

mod back_reference_tests;
mod damage_tests;
mod event_encoding_tests;
mod fuzz;
mod old_files;
mod old_files_tests;
mod owned;
mod round_trip_tests;
#[cfg(feature = "slow-tests")]
mod size;
#[cfg(feature = "slow-tests")]
mod synthetic_stream;
