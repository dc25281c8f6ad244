// Starts Swagger UI on /docs: FastAPI's own settings, kept in a file so the page's
// Content-Security-Policy needs no inline script. validatorUrl null: no call to
// validator.swagger.io.
"use strict";
(() => {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
})();
