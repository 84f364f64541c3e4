// The conformance scripts' runner: named checks run one after another, each printed as
// "ok   NAME" or "FAIL NAME: error"; the process exits 1 if any failed.

const checks = [];

/// Registers a check: `fn` is async and throws (an assertion) when the check fails.
export function check(name, fn) {
  checks.push([name, fn]);
}

/// Runs every registered check in order; `before` runs before each one.
export async function runChecks(before = () => {}) {
  let failed = 0;
  for (const [name, fn] of checks) {
    before();
    try {
      await fn();
      console.log(`ok   ${name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e.stack ?? e}`);
    }
  }
  process.exit(failed === 0 ? 0 : 1);
}
