// An OAuth 2.1 authorization server for the end-to-end tests of users'
// connections: panva's oidc-provider (a certified OpenID Provider), with
// its development sign-in pages, JWT access tokens per resource, refresh
// tokens, revocation, and the RFC 8693 token-exchange grant registered
// through the provider's own `registerGrantType`.
//
// Environment: AS_PORT (where it listens), GATEWAY_REDIRECT_URI (the
// gateway's /connect/callback), GATEWAY_RESOURCE (the audience of tokens
// that call the gateway), API_RESOURCE (the API users connect to),
// SHORT_RESOURCE (a second such API), MCP_RESOURCE (an MCP server users
// connect to), BRIEF_RESOURCE (an API whose tokens live 20 seconds),
// ROTATING_RESOURCE (an API whose tokens live 40 seconds), EXCHANGE_RESOURCE
// (the API reached by token exchange), API_TOKEN_TTL (seconds an API token
// lives). Prints "ready <issuer>" when listening.
//
// Refresh tokens rotate on every use, and a spent one presented again
// revokes its whole grant (the provider's reuse detection): a client that
// renews one token twice disconnects its user.
// GET /test/stats answers how many grants of each type it issued, how
// many tokens and whole grants were revoked, and how many token requests
// it refused.

import Provider, { errors } from 'oidc-provider';
import * as jose from 'jose';

const port = Number(process.env.AS_PORT);
const issuer = `http://127.0.0.1:${port}`;
const gateway = process.env.GATEWAY_RESOURCE;
const api = process.env.API_RESOURCE;
const exchangeTarget = process.env.EXCHANGE_RESOURCE;
const short = process.env.SHORT_RESOURCE;
const mcp = process.env.MCP_RESOURCE;
const brief = process.env.BRIEF_RESOURCE;
const rotating = process.env.ROTATING_RESOURCE;
const apiTtl = Number(process.env.API_TOKEN_TTL || 3600);

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';

const { privateKey, publicKey } = await jose.generateKeyPair('RS256', { extractable: true });
const signing = { ...(await jose.exportJWK(privateKey)), kid: 'k1', alg: 'RS256', use: 'sig' };

const stats = { grants: {}, revoked: 0, grants_revoked: 0, refused: 0 };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'toolgate',
      client_secret: 'toolgate-secret',
      redirect_uris: [process.env.GATEWAY_REDIRECT_URI],
      grant_types: ['authorization_code', 'refresh_token', 'client_credentials', TOKEN_EXCHANGE],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
    {
      // The test signs users in with it, for tokens that call the gateway.
      client_id: 'tester',
      client_secret: 'tester-secret',
      redirect_uris: ['http://127.0.0.1:9/callback'],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys: [signing] },
  cookies: { keys: ['a test cookie key that is long enough'] },
  scopes: ['openid', 'api'],
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => {
        if (![gateway, api, short, mcp, brief, rotating, exchangeTarget].includes(resource)) {
          throw new errors.InvalidTarget();
        }
        return {
          scope: 'api',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: { [api]: apiTtl, [brief]: 20, [rotating]: 40 }[resource] || 3600,
        };
      },
    },
  },
  issueRefreshToken: (ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: () => true,
  // Tokens for the gateway name the API key they act as.
  extraTokenClaims: (ctx, token) => (token.aud === gateway || (Array.isArray(token.aud) && token.aud.includes(gateway))
    ? { toolgate_key: 'team' } : undefined),
  pkce: { required: () => true },
});

// A whole grant revoked (a spent refresh token presented again, or a
// revocation), and token requests refused.
provider.on('grant.revoked', () => { stats.grants_revoked += 1; });
provider.on('grant.error', () => { stats.refused += 1; });

provider.on('grant.success', (ctx) => {
  const type = ctx.oidc.params.grant_type;
  stats.grants[type] = (stats.grants[type] || 0) + 1;
});

// RFC 8693: a JWT this server issued for the gateway, traded for a token
// for the exchange's API, for the same user.
provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
  const params = ctx.oidc.params;
  if (params.subject_token_type !== ACCESS_TOKEN) {
    throw new errors.InvalidRequest('subject_token_type must be an access token');
  }
  let claims;
  try {
    ({ payload: claims } = await jose.jwtVerify(params.subject_token, publicKey, { issuer, audience: gateway }));
  } catch (e) {
    throw new errors.InvalidGrant(`subject_token is not valid: ${e.message}`);
  }
  const resource = [].concat(params.resource || exchangeTarget)[0];
  if (resource !== exchangeTarget) {
    throw new errors.InvalidTarget();
  }
  const grant = new provider.Grant({ accountId: claims.sub, clientId: ctx.oidc.client.clientId });
  grant.addResourceScope(resource, 'api');
  const grantId = await grant.save();
  const token = new provider.AccessToken({
    accountId: claims.sub,
    client: ctx.oidc.client,
    grantId,
    gty: 'token_exchange',
    scope: 'api',
  });
  token.resourceServer = new provider.ResourceServer(resource, {
    scope: 'api', audience: resource, accessTokenFormat: 'jwt', accessTokenTTL: 600,
  });
  const value = await token.save();
  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN,
    token_type: 'Bearer',
    expires_in: token.expiration,
    scope: 'api',
  };
}, ['subject_token', 'subject_token_type', 'requested_token_type', 'resource', 'audience', 'scope', 'actor_token', 'actor_token_type'], ['resource', 'audience']);

provider.use(async (ctx, next) => {
  if (ctx.path === '/test/stats') {
    ctx.body = stats;
    return;
  }
  await next();
  if (ctx.path === '/token/revocation' && ctx.status === 200) {
    stats.revoked += 1;
  }
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
