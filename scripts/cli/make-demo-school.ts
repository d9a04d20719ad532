// Writes fixtures/demo-school.json: a made-up school with 640 students, 30 courses, 12 rooms
// and a weekly timetable. Seeded, so running it again produces the same file.
// Usage: tsx scripts/cli/make-demo-school.ts [OUT]
import fs from "node:fs";
import type { SchoolFile } from "../../server/services/school-import.ts";
import { seededRandom } from "../../badge-sim/runners/seeded-random.ts";

const FIRST = ["Ada", "Ben", "Chloe", "Dev", "Elif", "Farah", "Gus", "Hana", "Ivan", "Jun", "Kemi", "Liam", "Maya", "Nico", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Victor", "Wren", "Xin", "Yusuf", "Zoe"];
const LAST = ["Abbott", "Baker", "Chen", "Diaz", "Evans", "Fischer", "Garcia", "Haddad", "Ito", "Jones", "Khan", "Lopez", "Moreau", "Novak", "Okafor", "Patel", "Quist", "Rossi", "Silva", "Tanaka", "Usman", "Vargas", "Wong", "Yilmaz", "Zielinski"];
const SUBJECTS = ["Mathematics", "English", "Physics", "Chemistry", "Biology", "History", "Geography", "Art", "Music", "Computing"];
const PERIODS = [["08:30", "09:20"], ["09:30", "10:20"], ["10:40", "11:30"], ["11:40", "12:30"], ["13:30", "14:20"], ["14:30", "15:20"]] as const;

export function makeDemoSchool(): SchoolFile {
  const random = seededRandom(20261122);
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)]!;
  const hex = (bytes: number) =>
    Array.from({ length: bytes }, () => Math.floor(random() * 256).toString(16).padStart(2, "0")).join("").toUpperCase();

  const rooms = Array.from({ length: 12 }, (_, i) => ({ code: `R${101 + i}`, name: `Room ${101 + i}` }));
  const students = Array.from({ length: 640 }, (_, i) => ({
    external_id: `S${String(10001 + i)}`,
    name: `${pick(FIRST)} ${pick(LAST)}`,
    card_uid: `04${hex(6)}`,
  }));
  // Three year groups of about 213 students; each subject is taught to each year group, except
  // that year 3 Computing is one large lecture for 300 students (the roll benchmark's size).
  const courses: { code: string; name: string }[] = [];
  const enrollments: { course_code: string; external_ids: string[] }[] = [];
  for (let c = 0; c < 30; c++) {
    const subject = SUBJECTS[c % SUBJECTS.length]!;
    const year = Math.floor(c / SUBJECTS.length) + 1;
    const code = `${subject.slice(0, 4).toUpperCase()}-Y${year}`;
    courses.push({ code, name: `${subject}, year ${year}` });
    const group = students.slice((year - 1) * 213, year * 213);
    const members = c === 29 ? students.slice(340, 640) : group.filter(() => random() < 0.45);
    enrollments.push({ course_code: code, external_ids: members.map((s) => s.external_id) });
  }
  // Course c meets in room c % 12 on four weekdays (skipping weekday c % 5), at a period that
  // no other course in that room uses, so no room is double-booked.
  const timetable = courses.flatMap((course, c) =>
    [1, 2, 3, 4, 5]
      .filter((weekday) => weekday !== (c % 5) + 1)
      .map((weekday, d) => {
        const [start, end] = PERIODS[Math.floor(c / 12) + 3 * (d % 2)]!;
        return { course_code: course.code, room: rooms[c % 12]!.code, weekday, start, end };
      }),
  );
  // MATH-Y1 (course 0, room R101) meets at 08:30 every day, weekends included (the first period
  // is free in R101 on every day), and S10001 takes it: the README's examples ask for today's
  // MATH-Y1 session, tap into yesterday's at 08:32 and mark S10001, whatever day the demo is loaded.
  const mathsTimes = { start: PERIODS[0][0], end: PERIODS[0][1] };
  for (const entry of timetable) if (entry.course_code === "MATH-Y1") Object.assign(entry, mathsTimes);
  for (const weekday of [1, 6, 7]) timetable.push({ course_code: "MATH-Y1", room: "R101", weekday, ...mathsTimes });
  const maths = enrollments[0]!;
  if (!maths.external_ids.includes("S10001")) maths.external_ids.unshift("S10001");
  return { school: { name: "Badgebench Demo Academy" }, rooms, students, courses, enrollments, timetable };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = process.argv[2] ?? new URL("../../fixtures/demo-school.json", import.meta.url).pathname;
  fs.writeFileSync(out, `${JSON.stringify(makeDemoSchool(), null, 1)}\n`);
  process.stdout.write(`wrote ${out}\n`);
}
