// GET /health: routing, the gate's onRequest hook and a `SELECT 1` ping of the database.
export const name = 'health';
export const connections = 32;
export const duration = 10;
export const baseline = 'jwt-select';

export const request = () => ({ method: 'GET', path: '/health' });
