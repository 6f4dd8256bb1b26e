// Chainsub dashboard overview (/dashboard): the page is rendered by the server (figures,
// charts as inline SVG); this only signs out, with the session's CSRF token.
"use strict";

(function () {
  const settings = JSON.parse(document.getElementById("dashboard-settings").textContent);
  const statusEl = document.getElementById("status");
  document.getElementById("signout").addEventListener("click", async () => {
    try {
      const res = await fetch("/api/v1/auth/session", {
        method: "DELETE",
        headers: { accept: "application/json", [settings.csrfHeader]: settings.csrfToken },
        credentials: "same-origin",
      });
      if (!res.ok) throw new Error("HTTP " + res.status);
      location.reload();
    } catch (e) {
      statusEl.textContent = "Sign-out failed: " + e.message;
    }
  });
})();
