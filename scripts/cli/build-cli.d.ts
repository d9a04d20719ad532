// Types of build-cli.js (plain JavaScript, because it runs before there is a bundle) for the
// TypeScript that imports it: the tests' setup and the start benchmark.
export declare const CLI_DIR: string;
export declare const CLI_BUNDLE: string;
export declare function cliBundleIsStale(): boolean;
export declare function buildCliBundle(): Promise<void>;
export declare function upToDateCliBundle(): Promise<string>;
