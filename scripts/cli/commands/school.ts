// `import` and `sessions`: the school's data, written straight to the store.
import type { Argv } from "yargs";
import fs from "node:fs";
import path from "node:path";
import { SESSION_ACTIONS, transitionSession, type SessionAction } from "../../../server/services/sessions.ts";
import { adminOptions, withStore, print } from "./admin.ts";
import { counted } from "../../../badge-sim/reports/text.ts";

export function schoolCommands(y: Argv): Argv {
  return y
    .command(
      "import <file>",
      "import a school (rooms, students, courses, enrollments, sessions, timetable)",
      (y) =>
        adminOptions(y)
          .positional("file", { type: "string", demandOption: true, describe: "the school as JSON, like fixtures/demo-school.json" })
          .option("mode", { choices: ["test", "live"] as const, default: "test" as const, describe: "import into the test mode's data or the live one's" })
          .option("week", { type: "string", describe: "a date in the week the timetable expands into (default: this week)" }),
      (args) =>
        withStore(args, async (store) => {
          const { importSchool, SchoolImportError } = await import("../../../server/services/school-import.ts");
          const file = path.resolve(args.file);
          let school: unknown;
          try {
            school = JSON.parse(fs.readFileSync(file, "utf8"));
          } catch (error) {
            throw new SchoolImportError(`${file}: cannot read JSON: ${(error as Error).message}`);
          }
          const summary = await importSchool(store.db, school, { mode: args.mode, week: args.week, source: file });
          print(
            args,
            summary,
            `imported into ${summary.mode} mode: ${counted(summary.rooms, "room")}, ${counted(summary.students, "student")}, ${counted(summary.courses, "course")}, ${counted(summary.enrollments, "enrollment")}, ${counted(summary.sessions_added, "new session")}`,
          );
        }),
    )
    .command(
      "sessions <action> <id>",
      "open, close or cancel a session",
      (y) =>
        adminOptions(y)
          .positional("action", { choices: Object.keys(SESSION_ACTIONS) as SessionAction[], demandOption: true, describe: "what to do to the session" })
          .positional("id", { type: "string", demandOption: true, describe: "the session's id (ses_...)" }),
      (args) =>
        withStore(args, async (store) => {
          const session = await store.db.transaction().execute((trx) => transitionSession(trx, args.id, args.action));
          print(args, session, `${session.id} is now ${session.status}`);
        }),
    );
}
