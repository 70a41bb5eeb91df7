// Test helper: the official OpenAI client for a server started by server.mjs, and a stream reader.
import OpenAI from 'openai';

/// The official OpenAI client for a started server (no retries, so every failure shows).
export function client(server, { apiKey = 'sk-no-key-needed', timeout = 300000 } = {}) {
  return new OpenAI({ baseURL: server.baseURL, apiKey, maxRetries: 0, timeout });
}

/// Iterates an openai stream; returns {text, chunks, finish, usage, timings, last}.
export async function collect(stream) {
  let text = '';
  let finish = null, usage = null, timings = null, last = null;
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    last = chunk;
    const c = chunk.choices && chunk.choices[0];
    if (c && c.delta && typeof c.delta.content === 'string') text += c.delta.content;
    if (c && c.finish_reason) finish = c.finish_reason;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.timings) timings = chunk.timings;
  }
  return { text, chunks, finish, usage, timings, last };
}
