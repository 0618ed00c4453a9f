#!/usr/bin/env node
// A laravel-worker handler in Node.js, for the process and persistent modes.
//
//   [[handlers]]
//   match = "App\\Jobs\\*"
//   command = ["node", "/srv/handlers/handler.js"]
//   # mode = "persistent"   # keep it warm: one process takes job after job
//
// handle() runs one job and returns the answer. This one does what the job's
// data.action asks (done by default; "throw" throws), so every answer can be
// tried with `laravel-worker push default --job 'App\Jobs\Try' --data
// '{"action":"release","delay":5}'`. Replace its body with the real work.
'use strict';
const fs = require('fs');
const readline = require('readline');

async function handle(job) {
  if (job.mode === 'failed') { // the failed hook: the worker failed the job
    console.error(`failed hook for ${job.name}: ${job.exception}`);
    return { action: 'done' };
  }
  const data = job.payload.data || {};
  console.error(`running ${job.name}, attempt ${job.attempt}`);
  if (data.action === 'throw') throw new Error('the job asked to throw');
  return data.action ? data : { action: 'done' };
}

// An uncaught error, as the answer the worker records it with.
const failure = (error) => ({ action: 'exception', class: error.name, message: error.message });

async function main() {
  if (process.env.LARAVEL_WORKER_PROTOCOL === 'persistent') {
    // One request per line on stdin; exactly one answer per request on fd 3,
    // echoing its "call". End of stdin means exit.
    for await (const line of readline.createInterface({ input: process.stdin })) {
      const request = JSON.parse(line);
      const job = { ...request, payload: JSON.parse(request.payload) };
      const answer = await handle(job).catch(failure);
      fs.writeSync(3, JSON.stringify({ ...answer, call: request.call }) + '\n');
    }
  } else {
    // One job per process: the payload on stdin, the rest in the environment.
    // Exit 0 = done; any other answer goes to the result file.
    const env = process.env;
    const job = {
      mode: env.LARAVEL_WORKER_MODE,
      name: env.LARAVEL_WORKER_JOB_NAME,
      attempt: Number(env.LARAVEL_WORKER_ATTEMPT),
      exception: env.LARAVEL_WORKER_EXCEPTION || '',
      payload: JSON.parse(fs.readFileSync(0, 'utf8')),
    };
    const answer = await handle(job).catch(failure);
    if (answer.action !== 'done') {
      fs.writeFileSync(env.LARAVEL_WORKER_RESULT, JSON.stringify(answer));
    }
  }
}

main();
