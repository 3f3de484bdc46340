// likes-client.js: the likes service's public /v1 API for a browser, with the client rules of the spec
// (CLI-1 … CLI-4), the same semantics as the Python client (clients/python). Dependency-free ES module:
//
//   import { LikesClient } from "/static/likes-client.js";
//   const likes = new LikesClient("", token);
//   likes.onChange((videoId) => render(videoId));   // a target, a confirmation or a count moved
//   likes.intend("v1", true);                        // a tap: returns at once
//   const feed = await likes.batch(["v1", "v2"]);    // my state and counts, my confirmed writes overlaid
//
// - CLI-1: one Idempotency-Key per command, reused by every retry of it (a timeout, a network error, a 5xx);
//   per video at most one command in flight: further taps only replace the final target, and when the command
//   in flight is confirmed the target is sent only if the server does not already hold it.
// - CLI-2: the highest confirmed version per video wins, whatever order answers arrive in.
// - CLI-3: batch queries carry minRelationVersions, and an answer older than a confirmation shows the latter.
// - CLI-4: `displayCount` is always the server's number; `optimisticCount` adds this session's own change
//   that number does not show yet, until the number moves (then the server is taken to have caught up).

export const LIKED = "LIKED";
export const UNLIKED = "UNLIKED";
const BATCH_MAX_IDS = 100;

export class LikesError extends Error {
  constructor(status, code, message, body = {}) {
    super(message || code);
    this.name = status === 429 ? "RateLimited" : "LikesError";
    this.status = status; // null: no answer (timeout, network)
    this.code = code;
    this.body = body;
    this.currentRelation = body.currentRelation || null;
    this.retryAfter = null;
  }
}

const newKey = () =>
  globalThis.crypto && crypto.randomUUID ? crypto.randomUUID().replaceAll("-", "")
    : Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16)).join("");

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function retryAfterMs(response, body) {
  const raw = response.headers.get("Retry-After");
  if (raw !== null && raw !== "" && !Number.isNaN(Number(raw))) return Math.max(0, Number(raw) * 1000);
  if (raw) {
    const at = Date.parse(raw);
    if (!Number.isNaN(at)) return Math.max(0, at - Date.now());
  }
  return typeof body.retryAfterSeconds === "number" ? body.retryAfterSeconds * 1000 : null;
}

export class LikesClient {
  constructor(baseUrl, token, { timeout = 5000, maxAttempts = 5, backoffBase = 200, backoffCap = 5000,
    maxRetryAfter = 60000, fetch: fetchImpl = globalThis.fetch.bind(globalThis) } = {}) {
    this.baseUrl = baseUrl.replace(/\/$/, "");
    this.token = token;
    this.timeout = timeout;
    this.maxAttempts = Math.max(1, maxAttempts);
    this.backoffBase = backoffBase;
    this.backoffCap = backoffCap;
    this.maxRetryAfter = maxRetryAfter;
    this._fetch = fetchImpl;
    this._confirmed = new Map(); // videoId -> {videoId, state, version, replayed, operationId}  (CLI-2)
    this._intents = new Map(); // videoId -> {target, busy, error}                               (CLI-1)
    this._countBase = new Map(); // videoId -> {count, reflects}                                   (CLI-4)
    this._stateBeforeSession = new Map();
    this._listeners = new Set();
    this._waiters = new Set();
  }

  // --- observing ------------------------------------------------------------------------------------------

  onChange(listener) {
    this._listeners.add(listener);
    return () => this._listeners.delete(listener);
  }

  _changed(videoId) {
    for (const listener of this._listeners) {
      try { listener(videoId); } catch (error) { console.error(error); }
    }
    for (const wake of this._waiters) wake();
  }

  /** The relation with the highest version the server confirmed to this client, or undefined. */
  confirmed(videoId) { return this._confirmed.get(videoId); }

  /** What the user last asked for this video (the local final target), or undefined. */
  target(videoId) { const intent = this._intents.get(videoId); return intent && intent.target; }

  /** True while a command of this video is in flight. */
  pending(videoId) { const intent = this._intents.get(videoId); return Boolean(intent && intent.busy); }

  /** The state to show: the final target while one is pending, else the confirmed state. */
  shown(videoId) {
    if (this.pending(videoId)) return this.target(videoId);
    const held = this._confirmed.get(videoId);
    return held ? held.state : undefined;
  }

  _confirm(relation) {
    const held = this._confirmed.get(relation.videoId);
    if (!held || relation.version > held.version) this._confirmed.set(relation.videoId, relation);
    return this._confirmed.get(relation.videoId);
  }

  // --- the command ----------------------------------------------------------------------------------------

  /** Set the relation to LIKED or UNLIKED as one operation; resolves to its verdict. */
  async setLike(videoId, liked, { baseVersion } = {}) {
    const body = { desiredState: liked ? LIKED : UNLIKED };
    if (baseVersion !== undefined && baseVersion !== null) body.baseVersion = baseVersion;
    let data;
    try {
      data = await this._call("PUT", `/v1/videos/${encodeURIComponent(videoId)}/like-relation`,
        { body, key: newKey() });
    } catch (error) {
      if (error.currentRelation) {
        this._confirm({ videoId, state: error.currentRelation.state,
          version: error.currentRelation.relationVersion, replayed: false, operationId: null });
        this._changed(videoId);
      }
      throw error;
    }
    const verdict = { videoId, state: data.state, version: data.relationVersion, replayed: Boolean(data.replayed),
      operationId: data.operationId || null };
    if (data.changed && !this._countBase.has(videoId) && !this._stateBeforeSession.has(videoId)) {
      this._stateBeforeSession.set(videoId, verdict.state === LIKED ? UNLIKED : LIKED);
    }
    this._confirm(verdict);
    const current = data.currentRelation;
    if (current && current.relationVersion !== verdict.version) {
      this._confirm({ videoId, state: current.state, version: current.relationVersion, replayed: false,
        operationId: null });
    }
    this._changed(videoId);
    return verdict;
  }

  // --- intents (CLI-1) ------------------------------------------------------------------------------------

  /** A tap: record the user's latest wish for the video and return at once. */
  intend(videoId, liked) {
    const target = liked ? LIKED : UNLIKED;
    let intent = this._intents.get(videoId);
    if (!intent) this._intents.set(videoId, (intent = { target, busy: false, error: null }));
    intent.target = target;
    intent.error = null;
    if (!intent.busy) {
      intent.busy = true;
      this._drive(videoId, intent);
    }
    this._changed(videoId);
  }

  async _drive(videoId, intent) {
    let first = true;
    for (;;) {
      const held = this._confirmed.get(videoId);
      if (!first && held && held.state === intent.target) break;
      first = false;
      try {
        await this.setLike(videoId, intent.target === LIKED);
      } catch (error) {
        intent.error = error;
        break;
      }
    }
    intent.busy = false;
    this._changed(videoId);
  }

  /** Resolves when every video's confirmed state is its final target (to the confirmed relations); rejects
   * with an error a background command hit, or on timeout. */
  settle(timeoutMs = null) {
    return new Promise((resolve, reject) => {
      let timer = null;
      const check = () => {
        for (const intent of this._intents.values()) {
          if (intent.error) {
            const error = intent.error;
            intent.error = null;
            done();
            reject(error);
            return;
          }
        }
        if ([...this._intents.values()].some((intent) => intent.busy)) return;
        done();
        const out = {};
        for (const videoId of this._intents.keys()) if (this._confirmed.has(videoId)) out[videoId] = this._confirmed.get(videoId);
        resolve(out);
      };
      const done = () => { this._waiters.delete(check); if (timer) clearTimeout(timer); };
      if (timeoutMs !== null) timer = setTimeout(() => { done(); reject(new Error(`intents still in flight after ${timeoutMs} ms`)); }, timeoutMs);
      this._waiters.add(check);
      check();
    });
  }

  // --- reads (CLI-3, CLI-4) -------------------------------------------------------------------------------

  /** Each video's state and counts, keyed by id, with this client's own confirmed writes overlaid. */
  async batch(videoIds) {
    const ids = [...new Set(videoIds)];
    const out = new Map();
    for (let start = 0; start < ids.length; start += BATCH_MAX_IDS) {
      const chunk = ids.slice(start, start + BATCH_MAX_IDS);
      const body = { videoIds: chunk };
      const mins = {};
      for (const videoId of chunk) if (this._confirmed.has(videoId)) mins[videoId] = this._confirmed.get(videoId).version;
      if (Object.keys(mins).length) body.minRelationVersions = mins;
      const data = await this._call("POST", "/v1/like-relations/batch-query", { body });
      for (const item of data.items || []) out.set(item.videoId, this._videoState(item));
    }
    for (const videoId of out.keys()) this._changed(videoId);
    return out;
  }

  _videoState(item) {
    const videoId = item.videoId;
    const answered = { videoId, state: item.myState, version: item.relationVersion, replayed: false, operationId: null };
    const held = this._confirmed.get(videoId);
    const shown = held && held.version > answered.version ? held : this._confirm(answered);
    const display = item.displayCount;
    const available = Boolean(item.available);
    return { videoId, available, myState: shown.state, relationVersion: shown.version,
      displayCount: display === null || display === undefined ? null : display,
      countSnapshotAt: item.countSnapshotAt || null,
      optimisticCount: available && display !== null && display !== undefined
        ? this._optimisticCount(videoId, display, shown.state) : null };
  }

  // The first count the server showed this session, and which state of mine it reflects (my state before the
  // session's first confirmed change, if the session changed it first). While the server shows that number,
  // optimistic = number ± my change it lacks; once the number moves, the number wins.
  _optimisticCount(videoId, display, myState) {
    let base = this._countBase.get(videoId);
    if (!base) {
      const before = this._stateBeforeSession.get(videoId);
      this._stateBeforeSession.delete(videoId);
      base = { count: display, reflects: before || myState };
    } else if (display !== base.count) {
      base = { count: display, reflects: myState };
    }
    this._countBase.set(videoId, base);
    const value = (state) => (state === LIKED ? 1 : 0);
    return Math.max(0, display + value(myState) - value(base.reflects));
  }

  /** The caller's liked videos, newest first, page after page. */
  async *myLikes(limit = 50) { yield* this._pages("/v1/me/likes", limit); }

  /** Who liked the video, newest first (its author, or anyone when the likers are public). */
  async *likers(videoId, limit = 50) { yield* this._pages(`/v1/videos/${encodeURIComponent(videoId)}/likers`, limit); }

  async *_pages(path, limit) {
    let cursor = null;
    do {
      const query = new URLSearchParams({ limit: String(limit) });
      if (cursor) query.set("cursor", cursor);
      const data = await this._call("GET", `${path}?${query}`);
      for (const item of data.items || []) yield item;
      cursor = data.nextCursor;
    } while (cursor);
  }

  // --- HTTP with retries ----------------------------------------------------------------------------------

  async _call(method, path, { body = undefined, key = null } = {}) {
    for (let attempt = 1; ; attempt += 1) {
      const headers = { Authorization: `Token ${this.token}`, Accept: "application/json" };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      if (key) {
        headers["Idempotency-Key"] = key; // the same on every attempt of this command (CLI-1)
        headers["X-Request-ID"] = `${key}.${attempt}`;
      }
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), this.timeout);
      let response = null;
      let failure = null;
      try {
        response = await this._fetch(this.baseUrl + path, { method, headers, signal: abort.signal,
          body: body === undefined ? undefined : JSON.stringify(body) });
      } catch (error) {
        failure = error; // a timeout or a network error: the server may have committed; retry with the key
      } finally {
        clearTimeout(timer);
      }
      let retryAfter = null;
      if (response) {
        let data = {};
        try { data = await response.json(); } catch { data = {}; }
        if (response.ok) return data;
        const error = new LikesError(response.status, data.code || `http_${response.status}`, data.message, data);
        error.retryAfter = retryAfterMs(response, data);
        if (response.status < 500 || attempt >= this.maxAttempts) throw error;
        retryAfter = error.retryAfter;
      } else if (attempt >= this.maxAttempts) {
        throw new LikesError(null, failure && failure.name === "AbortError" ? "timeout" : "connection_error",
          `${method} ${path}: ${failure} after ${attempt} attempts`);
      }
      const ceiling = Math.min(this.backoffCap, this.backoffBase * 2 ** (attempt - 1));
      let delay = ceiling / 2 + Math.random() * (ceiling / 2);
      if (retryAfter !== null) delay = Math.max(delay, Math.min(retryAfter, this.maxRetryAfter));
      await sleep(delay);
    }
  }
}
