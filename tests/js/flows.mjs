// The official LangGraph JS client (@langchain/langgraph-sdk, pinned in package-lock.json)
// against the API's LangGraph dialect. Run by tests/test_langgraph_js.py:
//   node tests/js/flows.mjs <url> [assistant]
// The key comes from LANGGRAPH_API_KEY, as the client reads it by itself. Every step is
// printed as one JSON line {"step": ..., ...}; a failure prints {"step": "error", ...} and
// exits 1.
import { Client } from "@langchain/langgraph-sdk";

const [url, assistant = "confirmed"] = process.argv.slice(2);
if (!url) {
  console.error("usage: node flows.mjs <url> [assistant]");
  process.exit(2);
}
const client = new Client({ apiUrl: url });
const emit = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
const human = (text) => ({ messages: [{ role: "user", content: text }] });

try {
  const thread = await client.threads.create({ metadata: { client: "js" } });
  emit("thread", { thread });
  const tid = thread.thread_id;

  let created = null;
  for await (const part of client.runs.stream(tid, assistant, {
    input: human("hello from js"),
    streamMode: ["values", "messages-tuple", "updates"],
    onRunCreated: (meta) => {
      created = meta;
    },
  })) {
    emit("stream", { part });
  }
  emit("run_created", { run: created });

  // The whole stream again, from its start: what a reconnecting useStream asks for.
  for await (const part of client.runs.joinStream(tid, created.run_id, { lastEventId: "-1" })) {
    emit("join", { part });
  }

  emit("state", { state: await client.threads.getState(tid) });
  emit("run", { run: await client.runs.get(tid, created.run_id) });
  emit("wait", { values: await client.runs.wait(null, assistant, { input: human("stateless from js") }) });
  emit("done", {});
} catch (error) {
  emit("error", {
    name: error?.name ?? null,
    status: error?.status ?? null,
    message: String(error?.message ?? error),
  });
  process.exitCode = 1;
}
