// likes-feed.js: hearts and counts for a list of videos, on likes-client.js. The DOM contract (for tests and for
// other front ends to copy):
//   - a card per video: [data-video-id="<id>"];
//   - its heart: button[data-role="like"], aria-pressed="true|false", data-pending="true|false";
//   - its count: [data-role="count"], holding the server's number (displayCount; `data-optimistic` holds
//     optimisticCount, the number plus this session's change it does not show yet).
// A tap flips aria-pressed at once (the local final target) and sets data-pending until the server confirms
// that video's final target (CLI-1); the heart never goes back from a confirmed like because the count has not
// moved yet (CLI-4).

import { LIKED } from "./likes-client.js";

const COUNT_REFRESH_MS = 1500; // after a video settles, its count is read again (the projection is asynchronous)

export function mountFeed(root, client, videoIds) {
  const cards = new Map();
  const counts = new Map(); // videoId -> VideoState of the last batch answer
  let refreshTimer = null;

  for (const videoId of videoIds) {
    const card = document.createElement("article");
    card.className = "card";
    card.dataset.videoId = videoId;
    const title = document.createElement("h2");
    title.textContent = videoId;
    const heart = document.createElement("button");
    heart.type = "button";
    heart.dataset.role = "like";
    heart.setAttribute("aria-pressed", "false");
    heart.dataset.pending = "false";
    heart.setAttribute("aria-label", `like ${videoId}`);
    heart.textContent = "♥";
    heart.disabled = true; // until the first answer says the video is available
    const count = document.createElement("span");
    count.dataset.role = "count";
    count.textContent = "";
    heart.addEventListener("click", () => {
      client.intend(videoId, heart.getAttribute("aria-pressed") !== "true");
    });
    card.append(title, heart, count);
    root.append(card);
    cards.set(videoId, { card, heart, count });
  }

  function render(videoId) {
    const parts = cards.get(videoId);
    if (!parts) return;
    const state = counts.get(videoId);
    const shown = client.shown(videoId) ?? (state && state.myState);
    parts.heart.setAttribute("aria-pressed", String(shown === LIKED));
    parts.heart.dataset.pending = String(client.pending(videoId));
    if (state) {
      parts.heart.disabled = !state.available;
      parts.card.dataset.available = String(state.available);
      parts.count.textContent = state.displayCount === null ? "" : String(state.displayCount);
      parts.count.dataset.optimistic = state.optimisticCount === null ? "" : String(state.optimisticCount);
    }
  }

  async function refresh() {
    const states = await client.batch([...cards.keys()]);
    for (const [videoId, state] of states) counts.set(videoId, state);
    for (const videoId of cards.keys()) render(videoId);
  }

  const wasPending = new Set();
  client.onChange((videoId) => {
    render(videoId);
    if (client.pending(videoId)) {
      wasPending.add(videoId);
    } else if (wasPending.delete(videoId)) {
      clearTimeout(refreshTimer);
      refreshTimer = setTimeout(() => refresh().catch(console.error), COUNT_REFRESH_MS);
    }
  });
  return refresh();
}
