// A recorded transcript played back as the badge end of a mock serial port, so a console session
// captured on hardware becomes a test:
//   const replay = createReplayTarget(Transcript.load("fixtures/transcripts/happy-update.txt"), { speed: 50 });
//   const serial = await SerialConsole.open({ port: replay.path, binding: replay.binding });
// What the badge printed is emitted at its recorded times, divided by `speed` (Infinity: at once).
// Where the host sent a line in the recording, playback waits until the host sends the same bytes,
// and what follows is timed from then: the badge answered the command, so a test slower than the
// bench still sees the answer after its command. A host that sends something else has its write
// fail, which the console reports as the port failing, naming both.
import { setTimeout as sleep } from "node:timers/promises";
import { SerialPortMock } from "serialport";
import type { SerialBinding } from "./serial-console.ts";
import type { Transcript, TranscriptEntry } from "./transcript.ts";

// @serialport/binding-mock, by way of serialport: its own types do not resolve under NodeNext.
const MockBinding = SerialPortMock.binding;
type MockPortBinding = Awaited<ReturnType<typeof MockBinding.open>>;

export interface ReplayOptions {
  /** the mock port's path (default: a new /dev/replay<n>) */
  path?: string;
  /** how many times faster than recorded (default 1) */
  speed?: number;
}

export interface ReplayOutcome {
  /** received and sent entries played (notes do not count) */
  played: number;
  total: number;
}

export interface ReplayTarget {
  path: string;
  binding: SerialBinding;
  /** settles when playback ends: every entry played, or the port closed first */
  finished: Promise<ReplayOutcome>;
}

let replays = 0;

export function createReplayTarget(transcript: Transcript, options: ReplayOptions = {}): ReplayTarget {
  const speed = options.speed ?? 1;
  if (!(speed > 0)) throw new TypeError(`speed ${speed} must be more than 0 (Infinity plays without waiting)`);
  const path = options.path ?? `/dev/replay${++replays}`;
  const entries = transcript.entries.filter((entry): entry is Extract<TranscriptEntry, { kind: "received" | "sent" }> => entry.kind !== "note");
  MockBinding.createPort(path);

  let finish!: (outcome: ReplayOutcome) => void;
  const finished = new Promise<ReplayOutcome>((resolve) => (finish = resolve));
  const binding: SerialBinding = {
    list: () => MockBinding.list(),
    async open(openOptions) {
      const port = await MockBinding.open(openOptions);
      void play(port, entries, speed).then(finish);
      return port;
    },
  };
  return { path, binding, finished };
}

async function play(port: MockPortBinding, entries: Array<Extract<TranscriptEntry, { kind: "received" | "sent" }>>, speed: number): Promise<ReplayOutcome> {
  const expected = Buffer.concat(entries.filter((entry) => entry.kind === "sent").map((entry) => entry.bytes));
  let heard = Buffer.alloc(0);
  let wake = () => {};
  // binding-mock has no hook for what the host writes or for the port closing; wrapping this
  // port's own methods is how the badge end hears both.
  const write = port.write.bind(port);
  port.write = async (data: Buffer) => {
    await write(data);
    const next = Buffer.concat([heard, data]);
    if (!next.equals(expected.subarray(0, next.length))) {
      // Commands are lines: name the whole line the recording has here.
      const lineEnd = expected.indexOf(0x0a, heard.length);
      const wanted = expected.subarray(heard.length, lineEnd === -1 ? undefined : lineEnd + 1);
      const instead = wanted.length === 0 ? "nothing more" : JSON.stringify(wanted.toString());
      throw new Error(`replay: the host sent ${JSON.stringify(data.toString())} where the transcript has ${instead}`);
    }
    heard = next;
    wake();
  };
  const close = port.close.bind(port);
  port.close = async () => {
    await close();
    wake();
  };

  let played = 0;
  let heardUpTo = 0;
  let segmentWall = performance.now();
  let segmentT = 0;
  for (const entry of entries) {
    if (entry.kind === "sent") {
      heardUpTo += entry.bytes.length;
      while (heard.length < heardUpTo && port.isOpen) await new Promise<void>((resolve) => (wake = resolve));
      segmentWall = performance.now();
      segmentT = entry.t;
    } else {
      await sleep(Math.max(0, segmentWall + (entry.t - segmentT) / speed - performance.now()));
      if (port.isOpen) port.emitData(entry.bytes);
    }
    if (!port.isOpen) break;
    played += 1;
  }
  return { played, total: entries.length };
}
