// The exit codes that `sim run`, `sim fleet` and `hil run` share, so a CI system can tell a red
// run from one that proved nothing (pytest's "no tests collected" is its own code for the same reason).
export const EXIT = {
  /** Every scenario ran and passed (skipped ones allowed, as long as one ran). */
  passed: 0,
  /** A scenario failed or errored. */
  failed: 1,
  /** A usage mistake or an input that cannot be used (a file, a URL, a rig file, a data directory): nothing ran, nothing changed. */
  usage: 2,
  /** The server could not be reached or did not answer as a badgebench server: nothing ran. */
  unreachable: 3,
  /** A badge of the rig is in use by another run (after --wait, if given): nothing ran. The message names the holder. */
  busy: 4,
  /** Nothing ran: no scenario was found, or every one was skipped. */
  nothingRan: 5,
} as const;
