// Text the reports and the command lines share: counted nouns and aligned tables.

/** "1 scenario", "2 scenarios"; `many` for a noun that does not just take an s. */
export function counted(n: number, one: string, many = `${one}s`, format: (n: number) => string = String): string {
  return `${format(n)} ${n === 1 ? one : many}`;
}

/** A header, a rule under it and the rows, each column as wide as its widest cell. */
export function table(header: string[], rows: string[][], alignRight: boolean[] = []): string {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => (alignRight[column] ? cell.padStart(widths[column]!) : cell.padEnd(widths[column]!)))
      .join("  ")
      .trimEnd();
  return [line(header), line(widths.map((width) => "-".repeat(width))), ...rows.map(line)].join("\n");
}
