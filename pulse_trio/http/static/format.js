// How times, ages and counts read on the page. Times are UTC, as the API gives them.

/** "2026-12-02 12:00:01.234" from the API's RFC 3339 UTC time (the full value is the title). */
export function when(iso) {
  if (!iso) return "—";
  const match = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d{3})?/.exec(iso);
  return match ? `${match[1]} ${match[2]}${match[3] ?? ""}` : String(iso);
}

/** "850 ms", "4.2 s", "3 min 5 s", "2 h 3 min", "4 d 2 h". */
export function age(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Number(seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(1)} s`;
  const units = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];
  const parts = [];
  let rest = Math.floor(s);
  for (const [unit, size] of units) {
    if (rest >= size || (parts.length && parts.length < 2)) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
    if (parts.length === 2) break;
  }
  return parts.join(" ");
}

/** Seconds from `start` to `end` (RFC 3339), or to now when `end` is empty. */
export function between(start, end) {
  const from = Date.parse(start);
  const to = end ? Date.parse(end) : Date.now();
  return Number.isFinite(from) && Number.isFinite(to) ? Math.max(0, (to - from) / 1000) : null;
}

/** A count, or "10000+" when the API stopped counting at its cap. */
export function count(value, capped) {
  if (!value) return "0";
  return capped ? `${value}+` : String(value);
}

export function yesNo(value) {
  return value ? "yes" : "no";
}
