// The SQLite store's data directory, checked before anything is opened or created in it. Only
// the server creates a store (`create`); every other command opens an existing one, so a wrong
// --data (a typo, another working directory) is refused instead of silently getting a new, empty
// database whose keys the running server does not know. A data directory that cannot be used as
// it is (a file, unreadable, a database that is not one) is refused the same way: one line that
// names the path, and nothing created or changed.
import fs from "node:fs";
import path from "node:path";

export const DATABASE_FILE = "badgebench.sqlite";

/** The store could not be opened for a reason the user can fix (a bad URL, a database that does not answer). */
export class StoreError extends Error {
  override name = "StoreError";
}

/** The data directory or database given cannot be used as it is; nothing was created or changed (the CLI exits 2). */
export class UnusableStoreError extends StoreError {
  override name = "UnusableStoreError";
}

const errorCode = (error: unknown) => (error as NodeJS.ErrnoException).code ?? (error as Error).message;

function statOf(target: string): fs.Stats | undefined {
  try {
    return fs.statSync(target);
  } catch (error) {
    if (errorCode(error) === "ENOENT") return undefined;
    throw new UnusableStoreError(`cannot use the data directory ${target} (${errorCode(error)}); give --data a directory this user can read and write`);
  }
}

function requireAccess(target: string, what: string) {
  try {
    fs.accessSync(target, fs.constants.R_OK | fs.constants.W_OK);
  } catch (error) {
    throw new UnusableStoreError(`cannot read and write ${what} ${target} (${errorCode(error)}); give --data a directory this user can read and write`);
  }
}

/** The database file of `dataDir`, after checking the directory can hold it; creates the directory only when `create`. */
export function sqliteFileIn(dataDir: string, create: boolean): string {
  const file = path.join(dataDir, DATABASE_FILE);
  const directory = statOf(dataDir);
  if (directory && !directory.isDirectory()) throw new UnusableStoreError(`the data directory ${dataDir} is a file, not a directory; give --data a directory`);
  const database = directory && statOf(file);
  if (database?.isDirectory()) throw new UnusableStoreError(`${file} is a directory, not a database; move it away or give --data another directory`);
  if (!database && !create) {
    throw new UnusableStoreError(
      `no badgebench database in ${dataDir} (looked for ${file}); give --data the directory the server uses, or start the server there first (badgebench serve --data ${dataDir})`,
    );
  }
  if (directory) requireAccess(dataDir, "the data directory");
  if (database) requireAccess(file, "the database");
  if (!directory) {
    try {
      fs.mkdirSync(dataDir, { recursive: true });
    } catch (error) {
      throw new UnusableStoreError(`cannot create the data directory ${dataDir} (${errorCode(error)}); give --data a directory this user can create`);
    }
  }
  return file;
}
