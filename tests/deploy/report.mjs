// One line per check on stdout, "ok" or "FAIL" with the problems under it.

let failures = 0;

// Reports a check: it passes when `problems` (a string, an array, or nothing) holds none.
export function check(label, problems) {
  const list = [problems].flat().filter(Boolean);
  if (list.length === 0) {
    console.log(`ok    ${label}`);
  } else {
    failures++;
    console.log(`FAIL  ${label}`);
    for (const p of list) console.log(`        - ${p}`);
  }
}

export const failureCount = () => failures;
