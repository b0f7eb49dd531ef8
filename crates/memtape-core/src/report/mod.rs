//! Reports over a capture: replay, peak and leak attribution, sites, diffs, flamegraphs,
//! the offline HTML report and exports.
