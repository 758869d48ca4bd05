// A real `reachstore up` for the tests: its own data folder, a free block of ports, and a
// clean SIGTERM at the end (up stops its children itself).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const READY_PREFIX = "reachstore ready: ";
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;

/** The repository root, from dist/test/ where the compiled file runs. */
export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** The first port of `count` consecutive free ones (up uses base..base+9). */
export async function freePortBlock(count = 10): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * (40_000 - count));
    let free = true;
    for (let port = base; port < base + count && free; port++) {
      free = await portFree(port);
    }
    if (free) {
      return base;
    }
  }
  throw new Error("no block of free ports found");
}

export class RunningSystem {
  readonly grpcPortBase: number;
  readonly httpPort: number;
  readonly dataDir: string;
  readonly output: string[] = [];
  private process: ChildProcess | undefined;
  private exited: Promise<number | null> | undefined;

  private constructor(
    grpcPortBase: number,
    private readonly extraArgs: string[],
    private readonly env: NodeJS.ProcessEnv,
  ) {
    this.grpcPortBase = grpcPortBase;
    this.httpPort = grpcPortBase + 4;
    this.dataDir = mkdtempSync(join(tmpdir(), "reachstore-ts-"));
  }

  /** Starts `reachstore up` and resolves once it prints its ready line. */
  static async start(
    extraEnv: Record<string, string> = {},
    extraArgs: string[] = [],
  ): Promise<RunningSystem> {
    const env: NodeJS.ProcessEnv = { ...process.env, ...extraEnv, PYTHONUNBUFFERED: "1" };
    // The tests choose their credentials themselves.
    delete env["REACHSTORE_API_KEY"];
    const system = new RunningSystem(await freePortBlock(10), extraArgs, env);
    await system.launch();
    return system;
  }

  private launch(): Promise<void> {
    const bin = process.env["REACHSTORE_BIN"] ?? join(REPO_ROOT, ".venv", "bin", "reachstore");
    const args = [
      "up",
      "--data-dir", this.dataDir,
      "--http-port", String(this.httpPort),
      "--grpc-port-base", String(this.grpcPortBase),
      ...this.extraArgs,
    ];
    const child = spawn(bin, args, {
      cwd: REPO_ROOT,
      env: this.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.process = child;
    this.exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
    // Keep reading both streams to the end: a full pipe would block the services.
    createInterface({ input: child.stderr! }).on("line", (line) => this.output.push(line));
    const stdout = createInterface({ input: child.stdout! });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        void this.stop();
        reject(new Error(`reachstore up did not become ready:\n${this.tail()}`));
      }, START_TIMEOUT_MS);
      stdout.on("line", (line) => {
        this.output.push(line);
        if (line.startsWith(READY_PREFIX)) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once("error", (err) => {
        clearTimeout(timer);
        reject(err);
      });
      void this.exited!.then((code) => {
        clearTimeout(timer);
        reject(new Error(`reachstore up exited (${code}) before it was ready:\n${this.tail()}`));
      });
    });
  }

  tail(lines = 40): string {
    return this.output.slice(-lines).join("\n");
  }

  /** SIGTERM, as Ctrl-C or a service manager would; SIGKILL if up does not stop in time. */
  async stop(): Promise<number | null> {
    const child = this.process;
    if (child === undefined || this.exited === undefined) {
      return null;
    }
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
    }
    const timeout = new Promise<"timeout">((resolve) =>
      setTimeout(() => resolve("timeout"), STOP_TIMEOUT_MS).unref(),
    );
    const result = await Promise.race([this.exited, timeout]);
    if (result === "timeout") {
      child.kill("SIGKILL");
      await this.exited;
      rmSync(this.dataDir, { recursive: true, force: true });
      throw new Error(`reachstore up did not stop within ${STOP_TIMEOUT_MS} ms:\n${this.tail()}`);
    }
    rmSync(this.dataDir, { recursive: true, force: true });
    return result;
  }
}
