// The errors a user of the command line can fix, and the one-line body each prints as. Loaded
// only once a command failed (cli.ts): importing their modules loads the server, which --help
// does not need.
import { ApiError } from "../../server/errors.ts";
import { ListenError } from "../../server/main.ts";
import { PublishRefusal } from "../../server/releases/publishing.ts";
import { ReleaseStoreError } from "../../server/releases/release-store.ts";
import { SigningKeyError } from "../../server/releases/signing-keys.ts";
import { ApiKeyError } from "../../server/services/api-keys.ts";
import { DeviceError } from "../../server/services/devices.ts";
import { SchoolImportError } from "../../server/services/school-import.ts";
import { StoreError, UnusableStoreError } from "../../server/store/database.ts";
import { WebhookConfigError } from "../../server/webhooks/webhook-config.ts";
import { DownloadLimitsError } from "../../server/services/load-shaping.ts";
import { UnreachableError } from "../../badge-sim/network/unreachable.ts";
import { NotBadgebenchServerError } from "../harness/remote-server.ts";
import { SimSetupError } from "../harness/sim-server.ts";
import type { ErrorBody } from "./cli-failure.ts";
import { EXIT } from "./exit-codes.ts";
import { DatabaseSettingError, isSettingError } from "./serve.ts";

/** Errors a user can fix; printed as a message, never as a stack trace. */
export const USER_ERRORS = [ApiKeyError, SchoolImportError, ApiError, ListenError, DeviceError, PublishRefusal, ReleaseStoreError, SigningKeyError, SimSetupError, WebhookConfigError, DownloadLimitsError, DatabaseSettingError, StoreError, UnreachableError, NotBadgebenchServerError];

export function errorBody(error: Error): ErrorBody {
  if (error instanceof ApiError) return { code: error.code, message: error.message };
  if (error instanceof ListenError) return { code: "listen_failed", message: error.message };
  if (error instanceof UnusableStoreError) return { code: "data_unusable", message: error.message };
  if (error instanceof StoreError) return { code: "database_error", message: error.message };
  if (error instanceof PublishRefusal) return { code: "refused", message: error.message, reasons: error.reasons };
  if (error instanceof UnreachableError) return { code: "unreachable", message: error.message };
  if (error instanceof NotBadgebenchServerError) return { code: "not_badgebench", message: error.message };
  if (error instanceof SigningKeyError) return { code: "signing_key_invalid", message: error.message };
  return { code: "invalid_request", message: error.message };
}

/** The simulations' documented codes (exit-codes.ts); any other error a user can fix is 1. */
export function exitCodeOf(error: Error): number {
  if (error instanceof SimSetupError) return error.exitCode;
  if (error instanceof UnreachableError || error instanceof NotBadgebenchServerError) return EXIT.unreachable;
  if (error instanceof UnusableStoreError || error instanceof SigningKeyError || isSettingError(error)) return EXIT.usage;
  return 1;
}
